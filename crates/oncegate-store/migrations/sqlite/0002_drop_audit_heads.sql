-- The writer keeps the audit chain heads in memory (it is the only writer of the file)
-- and derives them from `audit` at start, so the heads table is no longer maintained.
DROP TABLE audit_heads;
