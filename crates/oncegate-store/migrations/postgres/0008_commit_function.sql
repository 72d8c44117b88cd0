-- One commit's writes in one statement (issue 35): a commit that writes an intent row
-- and/or an approval row and its audit record, with no control (kill switch, finding,
-- reservation, release, reconciliation), sends its prepared rows and its encoded event
-- in one call of this function instead of one statement each inside BEGIN ... COMMIT.
-- The call runs as its own transaction (autocommit), so it is durable when it answers.
--
-- It does what the transaction did, in the same order (rows locked before the shard
-- head, as every other commit locks them):
--   1. a decision valid only before `p_valid_until` is refused once `now()` reached it;
--   2. a row replaced (version > 1) is locked, and must still be the version the caller
--      checked against its seal (same `row_hash`, same audit link); a takeover needs its
--      lease run out by `now()`;
--   3. the shard's head is locked (created at genesis if the shard has none);
--   4. the record's hash: the caller's when the chain is keyed (the key never leaves the
--      gateway), sealed at the head the caller read, which must still be the head;
--      otherwise SHA-256 over the same bytes `oncegate_core::audit` hashes:
--      {"event":<canonical event>,"prev":"<prev>","seq":"<seq>","shard":<shard>};
--   5. the rows are written with their audit link, the record appended, the head moved.
--
-- Refusals roll the call back and are told apart by SQLSTATE: 40001 a lost race (the
-- store's Conflict), OGL01 a live lease (message: the milliseconds it runs on),
-- OGH01 a keyed commit sealed at a head that moved (message: "<seq> <hash>" of the head
-- now). Plain SQL and PL/pgSQL only: `sha256()` is built into PostgreSQL 11 and later.
CREATE FUNCTION oncegate_commit_v1(
    p_valid_until         TIMESTAMPTZ,
    -- The intent row, or a NULL key when the commit writes none. `p_i_version` is the
    -- version written; the `seen` columns are those of the row it replaces as checked.
    p_i_key               TEXT,
    p_i_generation        BIGINT,
    p_i_version           BIGINT,
    p_i_seen_hash         TEXT,
    p_i_seen_shard        BIGINT,
    p_i_seen_seq          BIGINT,
    p_i_takes_over        BOOLEAN,
    p_i_capability        TEXT,
    p_i_state             TEXT,
    p_i_cross_key         TEXT,
    p_i_run_id            TEXT,
    p_i_business_ref      TEXT,
    p_i_breaker_tripped   BOOLEAN,
    p_i_updated_at        TIMESTAMPTZ,
    p_i_body              TEXT,
    p_i_row_hash          TEXT,
    p_i_lease_expires_at  TIMESTAMPTZ,
    -- The approval row, as the intent row.
    p_a_id                TEXT,
    p_a_key               TEXT,
    p_a_generation        BIGINT,
    p_a_version           BIGINT,
    p_a_seen_hash         TEXT,
    p_a_seen_shard        BIGINT,
    p_a_seen_seq          BIGINT,
    p_a_state             TEXT,
    p_a_created_at        TIMESTAMPTZ,
    p_a_body              TEXT,
    p_a_row_hash          TEXT,
    p_a_principal         TEXT,
    p_a_expires_at        TIMESTAMPTZ,
    -- The audit record.
    p_shard               BIGINT,
    p_genesis             TEXT,
    p_event               BYTEA,
    p_body                TEXT,
    p_row_intent_key      TEXT,
    p_row_intent_gen      BIGINT,
    p_row_approval_key    TEXT,
    p_intent_key          TEXT,
    p_row_switch_key      TEXT,
    p_row_finding_key     TEXT,
    -- A keyed chain: the hash the caller sealed at head (p_head_seq, p_head_hash).
    p_hash                TEXT,
    p_head_seq            BIGINT,
    p_head_hash           TEXT
) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_lease  TIMESTAMPTZ;
    v_seq    BIGINT;
    v_prev   TEXT;
    v_hash   TEXT;
    v_n      BIGINT;
BEGIN
    IF p_valid_until IS NOT NULL AND now() >= p_valid_until THEN
        RAISE EXCEPTION 'the decision held only before %', p_valid_until USING ERRCODE = '40001';
    END IF;

    IF p_i_key IS NOT NULL AND p_i_version > 1 THEN
        SELECT lease_expires_at INTO v_lease FROM intents
         WHERE key = p_i_key AND generation = p_i_generation AND version = p_i_version - 1
           AND row_hash IS NOT DISTINCT FROM p_i_seen_hash
           AND audit_shard IS NOT DISTINCT FROM p_i_seen_shard
           AND audit_seq IS NOT DISTINCT FROM p_i_seen_seq
           FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'intent % generation %: not at version %', p_i_key, p_i_generation, p_i_version - 1
                USING ERRCODE = '40001';
        END IF;
        IF p_i_takes_over AND v_lease > now() THEN
            RAISE EXCEPTION '%', (extract(epoch from v_lease - now()) * 1000)::int8
                USING ERRCODE = 'OGL01';
        END IF;
    END IF;

    IF p_a_id IS NOT NULL AND p_a_version > 1 THEN
        PERFORM 1 FROM approvals
         WHERE id = p_a_id AND version = p_a_version - 1
           AND row_hash IS NOT DISTINCT FROM p_a_seen_hash
           AND audit_shard IS NOT DISTINCT FROM p_a_seen_shard
           AND audit_seq IS NOT DISTINCT FROM p_a_seen_seq
           FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'approval %: not at version %', p_a_id, p_a_version - 1
                USING ERRCODE = '40001';
        END IF;
    END IF;

    SELECT seq, hash INTO v_seq, v_prev FROM audit_heads WHERE shard = p_shard FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO audit_heads (shard, seq, hash) VALUES (p_shard, 0, p_genesis)
            ON CONFLICT (shard) DO NOTHING;
        SELECT seq, hash INTO v_seq, v_prev FROM audit_heads WHERE shard = p_shard FOR UPDATE;
    END IF;
    IF p_hash IS NOT NULL THEN
        IF v_seq <> p_head_seq OR v_prev <> p_head_hash THEN
            RAISE EXCEPTION '% %', v_seq, v_prev USING ERRCODE = 'OGH01';
        END IF;
        v_hash := p_hash;
    ELSE
        v_hash := encode(sha256(
            convert_to('{"event":', 'UTF8') || p_event
            || convert_to(',"prev":' || to_json(v_prev)::text || ',"seq":"' || (v_seq + 1)::text
                          || '","shard":' || p_shard::text || '}', 'UTF8')), 'hex');
    END IF;
    v_seq := v_seq + 1;

    IF p_i_key IS NOT NULL THEN
        IF p_i_version = 1 THEN
            INSERT INTO intents (key, generation, capability, state, cross_key, run_id, business_ref,
                                 breaker_tripped, updated_at, version, body, audit_shard, audit_seq,
                                 row_hash, lease_expires_at)
            VALUES (p_i_key, p_i_generation, p_i_capability, p_i_state, p_i_cross_key, p_i_run_id,
                    p_i_business_ref, p_i_breaker_tripped, p_i_updated_at, 1, p_i_body, p_shard,
                    v_seq, p_i_row_hash, p_i_lease_expires_at)
            ON CONFLICT (key, generation) DO NOTHING;
        ELSE
            UPDATE intents SET capability = p_i_capability, state = p_i_state, cross_key = p_i_cross_key,
                   run_id = p_i_run_id, business_ref = p_i_business_ref,
                   breaker_tripped = p_i_breaker_tripped, updated_at = p_i_updated_at,
                   version = p_i_version, body = p_i_body, audit_shard = p_shard, audit_seq = v_seq,
                   row_hash = p_i_row_hash, lease_expires_at = p_i_lease_expires_at
             WHERE key = p_i_key AND generation = p_i_generation AND version = p_i_version - 1;
        END IF;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        IF v_n <> 1 THEN
            RAISE EXCEPTION 'intent % generation %: written meanwhile', p_i_key, p_i_generation
                USING ERRCODE = '40001';
        END IF;
    END IF;

    IF p_a_id IS NOT NULL THEN
        IF p_a_version = 1 THEN
            INSERT INTO approvals (id, key, generation, state, created_at, version, body, audit_shard,
                                   audit_seq, row_hash, principal, expires_at)
            VALUES (p_a_id, p_a_key, p_a_generation, p_a_state, p_a_created_at, 1, p_a_body, p_shard,
                    v_seq, p_a_row_hash, p_a_principal, p_a_expires_at)
            ON CONFLICT (id) DO NOTHING;
        ELSE
            UPDATE approvals SET key = p_a_key, generation = p_a_generation, state = p_a_state,
                   created_at = p_a_created_at, version = p_a_version, body = p_a_body,
                   audit_shard = p_shard, audit_seq = v_seq, row_hash = p_a_row_hash,
                   principal = p_a_principal, expires_at = p_a_expires_at
             WHERE id = p_a_id AND version = p_a_version - 1;
        END IF;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        IF v_n <> 1 THEN
            RAISE EXCEPTION 'approval %: written meanwhile', p_a_id USING ERRCODE = '40001';
        END IF;
    END IF;

    INSERT INTO audit (shard, seq, prev_hash, hash, body, row_intent_key, row_intent_generation,
                       row_approval_key, intent_key, row_switch_key, row_finding_key)
    VALUES (p_shard, v_seq, v_prev, v_hash, p_body, p_row_intent_key, p_row_intent_gen,
            p_row_approval_key, p_intent_key, p_row_switch_key, p_row_finding_key);
    UPDATE audit_heads SET seq = v_seq, hash = v_hash WHERE shard = p_shard;
    RETURN v_seq;
END
$$;
