// The official `openai` npm package's embeddings client against `recur serve --embedding`:
//   node tests/serve/openai/embed.mjs BASE_URL API_KEY EXPECTED_JSON_FILE
// EXPECTED_JSON_FILE: {"inputs": [...], "embeddings": [[...], ...]} — the float embeddings the
// test (test_serve_embed.py) got from the server's own /v1/embeddings. The client's default
// encoding (it asks for base64 and decodes it itself) and encoding_format "float" must both
// give them, and a server error must surface as the package's error class.
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const [baseURL, apiKey, expectedFile] = process.argv.slice(2);
const want = JSON.parse(readFileSync(expectedFile, "utf8"));
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
let passed = 0, failed = 0;
function check(name, cond, detail = "") {
  if (cond) passed++;
  else { failed++; console.error(`FAILED: ${name} ${detail}`); }
}
function maxDiff(a, b) {
  if (!a || !b || a.length !== b.length) return Infinity;
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
  return d;
}

for (const format of [undefined, "float", "base64"]) {
  const args = { model: "recur", input: want.inputs };
  if (format) args.encoding_format = format;
  const r = await client.embeddings.create(args);
  const name = format ?? "default (base64, decoded by the client)";
  check(`${name}: one embedding per input`, r.data.length === want.inputs.length, JSON.stringify(r.data.length));
  for (let i = 0; i < r.data.length; i++) {
    const e = r.data[i].embedding;
    if (format === "base64") { // asked for explicitly: the client hands the string over
      const buf = Buffer.from(e, "base64");
      const f = Array.from(new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4));
      // the JSON floats are the float32 values to about 1e-16 (cJSON prints 15 digits when
      // they read back within DBL_EPSILON): rounded to float32 they are the bytes exactly
      const w = want.embeddings[i].map(Math.fround);
      check(`${name}: input ${i}`, maxDiff(f, w) === 0, String(maxDiff(f, w)));
    } else {
      check(`${name}: input ${i}`, Array.isArray(e) && maxDiff(e, want.embeddings[i]) < 1e-7,
            String(maxDiff(e, want.embeddings[i])));
    }
    check(`${name}: index ${i}`, r.data[i].index === i && r.data[i].object === "embedding");
  }
  check(`${name}: usage`, r.usage.prompt_tokens === want.prompt_tokens && r.usage.total_tokens === want.prompt_tokens,
        JSON.stringify(r.usage));
  check(`${name}: object list`, r.object === "list");
}
try {
  await client.embeddings.create({ model: "recur", input: "x", dimensions: 3 });
  check("dimensions 3 is refused", false);
} catch (e) {
  check("dimensions 3: BadRequestError naming it", e instanceof OpenAI.BadRequestError && /dimensions/.test(e.message), String(e));
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed || !passed ? 1 : 0);
