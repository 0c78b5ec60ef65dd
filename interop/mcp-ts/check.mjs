// Drives the example VRP node and keysvc's /mcp with the official
// TypeScript MCP SDK (@modelcontextprotocol/sdk, pinned in package.json),
// an MCP client written by other people than keysvc's:
//
//   node check.mjs --node http://127.0.0.1:8000/mcp --keysvc http://127.0.0.1:8080/mcp [--receipt-out FILE]
//
// It calls get_verified_stay_offer with camelCase arguments, checks the
// transport attestation the node attached, verifies the receipt made of
// the offer and transport attestations through keysvc's verify_vrp_receipt,
// checks that a tampered copy is invalid, hashes the arguments through
// hash_tool_arguments and reads the public documents as resources. Each
// check prints "ok - ..." or "not ok - ..."; the last line is
// "N passed, M failed"; the exit status is 1 when anything failed.
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const { values: args } = parseArgs({
  options: { node: { type: "string" }, keysvc: { type: "string" }, "receipt-out": { type: "string" } },
});
if (!args.node || !args.keysvc) {
  console.error("usage: node check.mjs --node URL --keysvc URL [--receipt-out FILE]");
  process.exit(2);
}

const META_KEY = "io.github.keysvc/vrp-transport";
// vrp-mcp-transport.json, camel_case_input_normalized: checkIn hashes as check_in.
const CAMEL_ARGS = { checkIn: "2026-09-02", checkOut: "2026-09-05", guests: 2 };
const WANT_SHA256 = "2e5b4dc2f91bec3a762993c25676b05d083bd2fabfcb52a403a651dcec7ca050";

let passed = 0;
let failed = 0;
function check(name, cond, detail) {
  if (cond) {
    passed++;
    console.log(`ok - ${name}`);
  } else {
    failed++;
    console.log(`not ok - ${name}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
  }
}

async function connect(url) {
  const client = new Client({ name: "keysvc-ts-interop", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

// The MCPF identity, read from a plain initialize POST as the MCPF seed does.
async function initializeMeta(url) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
    body: JSON.stringify({
      jsonrpc: "2.0", id: 1, method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "curl-like", version: "1" } },
    }),
  });
  const text = await res.text();
  const json = text.startsWith("{") ? JSON.parse(text) : JSON.parse(text.split("\n").find((l) => l.startsWith("data:")).slice(5));
  return json.result?._meta;
}

function verdict(result) {
  return (result.structuredContent?.attestations ?? []).map((a) => a.status + (a.error ? ":" + a.error : "")).join(" ");
}

const nodeClient = await connect(args.node);
const keysvcClient = await connect(args.keysvc);
try {
  const meta = await initializeMeta(args.node);
  check("node initialize advertises _meta.identity (did:web, jwks_uri)",
    typeof meta?.identity?.id === "string" && meta.identity.id.startsWith("did:web:") && meta.identity.keys?.jwks_uri?.startsWith("https://"), meta);

  const offer = await nodeClient.callTool({ name: "get_verified_stay_offer", arguments: CAMEL_ARGS });
  check("get_verified_stay_offer succeeds", !offer.isError, offer);
  const transport = offer._meta?.[META_KEY];
  check("result carries a signed transport attestation", transport?.status === "signed" && transport.attestation?.layer === "transport", transport);
  check("camelCase arguments are hashed as snake_case", transport?.arguments_sha256 === WANT_SHA256, transport?.arguments_sha256);
  const offerAtt = offer.structuredContent?.offer_attestation;
  check("offer attestation binds to the transport's ref", offerAtt?.layer === "offer" && offerAtt.ref === transport?.attestation?.ref, { offerAtt, ref: transport?.attestation?.ref });

  const tools = (await keysvcClient.listTools()).tools.map((t) => t.name).sort();
  check("keysvc /mcp lists its three tools", JSON.stringify(tools) === JSON.stringify(["get_key_history", "hash_tool_arguments", "verify_vrp_receipt"]), tools);

  const receipt = {
    vrp_receipt_version: "1.0",
    subject: { property: offer.structuredContent?.offer?.property, stay: "2026-09-02/2026-09-05" },
    issuer: { node: offer.structuredContent?.offer?.property },
    attestations: [offerAtt, transport?.attestation],
  };
  if (args["receipt-out"]) writeFileSync(args["receipt-out"], JSON.stringify(receipt, null, 2));
  const verified = await keysvcClient.callTool({ name: "verify_vrp_receipt", arguments: { receipt } });
  check("verify_vrp_receipt: the node's receipt is fully verified", verified.structuredContent?.fully_verified === true && verdict(verified) === "verified verified", verified.structuredContent);
  check("verify_vrp_receipt: lifecycle-aware against keysvc's history", verified.structuredContent?.verification?.mode === "lifecycle", verified.structuredContent?.verification);

  const sig = transport.attestation.signature;
  const last = sig.at(-2) === "A" ? "B" : "A";
  const tampered = structuredClone(receipt);
  tampered.attestations[1].signature = sig.slice(0, -2) + last + sig.at(-1);
  const bad = await keysvcClient.callTool({ name: "verify_vrp_receipt", arguments: { receipt_json: JSON.stringify(tampered) } });
  check("verify_vrp_receipt: a tampered transport attestation is invalid", verdict(bad) === "verified invalid:sig_invalid" && bad.structuredContent?.fully_verified === false, bad.structuredContent);

  const hashed = await keysvcClient.callTool({ name: "hash_tool_arguments", arguments: { params: { name: "get_verified_stay_offer", arguments: CAMEL_ARGS } } });
  check("hash_tool_arguments: VRP arguments_sha256 of camelCase arguments", hashed.structuredContent?.vrp?.arguments_sha256 === WANT_SHA256, hashed.structuredContent);
  check("hash_tool_arguments: SEP-2828 fallback digest", /^sha256:[0-9a-f]{64}$/.test(hashed.structuredContent?.sep2828_fallback?.digest ?? ""), hashed.structuredContent);
  check("hash_tool_arguments: SEP-2828 v1 fails closed without a binding", hashed.structuredContent?.sep2828_v1?.error?.code === "authorization_binding_missing", hashed.structuredContent);

  const badArgs = await keysvcClient.callTool({ name: "verify_vrp_receipt", arguments: {} });
  check("tool input errors are isError with a stable code", badArgs.isError === true && badArgs.structuredContent?.error?.code === "invalid_arguments", badArgs);

  const history = await keysvcClient.callTool({ name: "get_key_history", arguments: {} });
  check("get_key_history returns the key history", Array.isArray(history.structuredContent?.keys) && history.structuredContent.keys.length >= 1, history.structuredContent);

  const resources = (await keysvcClient.listResources()).resources.map((r) => r.uri).sort();
  check("public documents are resources", resources.includes("keysvc:///.well-known/jwks.json") && resources.includes("keysvc:///.well-known/did.json"), resources);
  const jwks = await keysvcClient.readResource({ uri: "keysvc:///.well-known/jwks.json" });
  check("the JWKS resource reads as a JWK Set", Array.isArray(JSON.parse(jwks.contents[0].text).keys), jwks.contents[0]);
} catch (err) {
  check("no exception", false, String(err?.stack ?? err));
} finally {
  await nodeClient.close();
  await keysvcClient.close();
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
