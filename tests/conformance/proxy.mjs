// A loopback proxy that adds one header to every request: the conformance suite cannot
// send an Authorization header, and oncegate refuses requests without one.
//
//   node proxy.mjs --target http://127.0.0.1:7878 --header "Authorization: Bearer tok"
// prints "proxy listening on http://127.0.0.1:PORT". Everything else (method, path,
// Host, Origin, body, the streamed SSE answer) passes through unchanged.

import http from "node:http";
import { parseArgs } from "node:util";

const { values } = parseArgs({ options: { target: { type: "string" }, header: { type: "string" } } });
const target = new URL(values.target);
const colon = values.header.indexOf(":");
const [name, value] = [values.header.slice(0, colon).trim().toLowerCase(), values.header.slice(colon + 1).trim()];

const server = http.createServer((req, res) => {
  const headers = { ...req.headers, [name]: value };
  const upstream = http.request(
    { host: target.hostname, port: target.port, method: req.method, path: req.url, headers },
    (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    },
  );
  upstream.on("error", (e) => {
    if (!res.headersSent) res.writeHead(502);
    res.end(String(e));
  });
  res.on("close", () => upstream.destroy());
  req.pipe(upstream);
});

server.listen(0, "127.0.0.1", () => {
  console.log(`proxy listening on http://127.0.0.1:${server.address().port}`);
});
