// Independent checks of a running keysvc with node `jose` and
// `did-resolver` + `web-did-resolver`, driven by interop/interop_test.go.
//
//   node verify.mjs CASE.json
//
// CASE.json: {"connect": {"host", "port"}, "ca": PEM,
//   "attestations": [{"layer", "alg", "kid", "source", "jws"}],   // must verify from source
//   "refused": [{"kid", "source", "jws"}],                          // must NOT verify from source
//   "dids": [{"did", "kids": [...], "absent": [...], "attestations": [index...]}],
//   "detached": [{"alg", "kid", "source", "signed_b64u", "signature_hex"}], // raw signatures, ADR 0028
//   "history": {"url", "revoked_jws", "revoked_kid", "good_jws"}}
//
// Every https URL (an attestation's source, did:web's did.json, the key
// history) is fetched over TLS from connect.host:connect.port, with the
// URL's host as SNI and Host header and the test CA as the only trust
// anchor: the request a verifier would send to the issuer's domain, routed
// to the test server. Prints one line per check and "interop: N checks
// passed"; exits 1 on the first failure.
import fs from 'node:fs';
import https from 'node:https';
import * as jose from 'jose';
import { Resolver } from 'did-resolver';
import { getResolver } from 'web-did-resolver';

const c = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));

class RoutedAgent extends https.Agent {
  createConnection(options, cb) {
    const servername = options.servername || options.host;
    return super.createConnection({ ...options, host: c.connect.host, port: c.connect.port, servername }, cb);
  }
}
// web-did-resolver fetches through cross-fetch (node-fetch, node:https with
// the global agent); jose through customFetch below.
https.globalAgent = new RoutedAgent({ ca: c.ca, keepAlive: false });

function httpsFetch(url, options = {}) {
  return new Promise((resolve, reject) => {
    const headers = {};
    if (options.headers) new Headers(options.headers).forEach((v, k) => { headers[k] = v; });
    const req = https.request(url, { method: 'GET', headers, agent: https.globalAgent }, (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => resolve(new Response(Buffer.concat(chunks), { status: res.statusCode, headers: res.headers })));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

let passed = 0;
function ok(msg) { passed++; console.log('ok   ' + msg); }
function fail(msg) { console.log('FAIL ' + msg); process.exit(1); }

const remote = (url) => jose.createRemoteJWKSet(new URL(url), { [jose.customFetch]: httpsFetch, cooldownDuration: 0 });

for (const a of c.attestations) {
  try {
    const { protectedHeader, payload } = await jose.compactVerify(a.jws, remote(a.source));
    if (protectedHeader.kid !== a.kid || protectedHeader.alg !== a.alg) fail(`${a.layer} ${a.kid}: header ${JSON.stringify(protectedHeader)}`);
    JSON.parse(new TextDecoder().decode(payload));
    ok(`jose ${a.layer} ${a.alg} ${a.kid} verifies from its source ${a.source}`);
  } catch (e) {
    fail(`jose ${a.layer} ${a.alg} ${a.kid} from ${a.source}: ${e.code || ''} ${e.message}`);
  }
}

for (const r of c.refused || []) {
  try {
    await jose.compactVerify(r.jws, remote(r.source));
    fail(`jose verified ${r.kid} from ${r.source}, which must not hold it`);
  } catch (e) {
    if (e.code !== 'ERR_JWKS_NO_MATCHING_KEY') fail(`jose ${r.kid} from ${r.source}: unexpected ${e.code} ${e.message}`);
    ok(`jose refuses ${r.kid} from ${r.source} (${e.code})`);
  }
}

const resolver = new Resolver(getResolver());
for (const d of c.dids) {
  const res = await resolver.resolve(d.did);
  if (res.didResolutionMetadata.error || !res.didDocument) fail(`resolve ${d.did}: ${JSON.stringify(res.didResolutionMetadata)}`);
  const doc = res.didDocument;
  if (doc.id !== d.did) fail(`${d.did}: document id ${doc.id}`);
  const methods = new Map((doc.verificationMethod || []).map((vm) => [vm.id, vm]));
  for (const kid of d.kids) {
    const id = `${d.did}#${kid}`;
    if (!methods.has(id) || !(doc.assertionMethod || []).includes(id)) fail(`${d.did}: no assertionMethod ${id}`);
  }
  for (const kid of d.absent || []) {
    if (methods.has(`${d.did}#${kid}`)) fail(`${d.did}: lists revoked ${kid} as a verification method`);
  }
  ok(`did-resolver resolves ${d.did}: ${methods.size} verification methods, ${d.kids.length} expected present, ${(d.absent || []).length} revoked absent`);
  for (const i of d.attestations) {
    const a = c.attestations[i];
    const vm = methods.get(`${d.did}#${a.kid}`);
    if (!vm) fail(`${d.did}: no method for ${a.kid}`);
    const key = await jose.importJWK(vm.publicKeyJwk, a.alg);
    await jose.compactVerify(a.jws, key).catch((e) => fail(`${d.did}#${a.kid}: ${e.message}`));
    ok(`jose verifies ${a.layer} ${a.alg} ${a.kid} with ${d.did}'s publicKeyJwk`);
  }
}

// Detached signatures (ADR 0028) with WebCrypto: ES256 as IEEE P1363
// r||s over SHA-256 of the signed bytes, Ed25519 over the bytes; the
// public key is the one the source JWKS lists for the kid.
for (const d of c.detached || []) {
  const set = JSON.parse(new TextDecoder().decode(await (await httpsFetch(d.source)).arrayBuffer()));
  const jwk = set.keys.find((k) => k.kid === d.kid);
  if (!jwk) fail(`detached: ${d.source} lacks ${d.kid}`);
  const algo = d.alg === 'ES256' ? { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } : { name: 'Ed25519' };
  const key = await crypto.subtle.importKey('jwk', { kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y }, algo, false, ['verify']);
  const signed = Buffer.from(d.signed_b64u, 'base64url');
  const sig = Buffer.from(d.signature_hex, 'hex');
  if (!(await crypto.subtle.verify(algo, key, sig, signed))) fail(`detached ${d.alg} ${d.kid}: WebCrypto refuses the signature`);
  const tampered = Buffer.concat([signed.subarray(0, signed.length - 1), Buffer.from(' }')]);
  if (await crypto.subtle.verify(algo, key, sig, tampered)) fail(`detached ${d.alg} ${d.kid}: verifies over other bytes`);
  ok(`WebCrypto verifies the detached ${d.alg} signature of ${d.kid} over its RFC 8785 bytes (key from ${d.source})`);
}

if (c.history) {
  const h = c.history;
  const set = remote(h.url);
  try {
    await jose.compactVerify(h.revoked_jws, set);
    fail(`plain jose verified a signature of the revoked ${h.revoked_kid} with the key history ${h.url}`);
  } catch (e) {
    if (e.code !== 'ERR_JWKS_NO_MATCHING_KEY') fail(`history: unexpected ${e.code} ${e.message}`);
    ok(`plain jose refuses the revoked ${h.revoked_kid} through the key history ${h.url} (${e.code})`);
  }
  await jose.compactVerify(h.good_jws, set).catch((e) => fail(`history: good signature refused: ${e.message}`));
  ok(`plain jose verifies the replacement's signature through the key history`);
}

console.log(`interop: ${passed} checks passed`);
