// The official `openai` npm package as a real client of `recur serve`:
//   node tests/openai/test.mjs BASE_URL API_KEY EXPECTED_TEXT_FILE
// completions (whole and streamed) give the expected greedy text, and the server's errors
// surface as the package's error classes.
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const [baseURL, apiKey, expectedFile] = process.argv.slice(2);
const expected = readFileSync(expectedFile, "utf8").replace(/\n$/, "");
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
let passed = 0, failed = 0;
function check(name, cond, detail = "") {
  if (cond) passed++;
  else { failed++; console.error(`FAILED: ${name} ${detail}`); }
}

const prompt = "Once upon a time";
const c = await client.completions.create({ model: "recur", prompt, max_tokens: 24, temperature: 0 });
check("completion text", c.choices[0].text === expected, JSON.stringify(c.choices[0].text));
check("finish reason", c.choices[0].finish_reason === "length");
check("usage", c.usage.completion_tokens === 24 && c.usage.prompt_tokens > 0);

const stream = await client.completions.create({ model: "recur", prompt, max_tokens: 24, temperature: 0, stream: true });
let text = "";
for await (const chunk of stream) for (const ch of chunk.choices) text += ch.text;
check("streamed text", text === expected, JSON.stringify(text));

try {
  await client.completions.create({ model: "recur", prompt, max_tokens: -1 });
  check("negative max_tokens is refused", false);
} catch (e) {
  check("negative max_tokens: BadRequestError", e instanceof OpenAI.BadRequestError && e.status === 400, String(e));
  check("the message names the field", /max_tokens/.test(e.message), e.message);
}
try {
  await new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 }).completions.create({ model: "recur", prompt, max_tokens: 1 });
  check("a wrong key is refused", false);
} catch (e) {
  check("a wrong key: AuthenticationError", e instanceof OpenAI.AuthenticationError && e.status === 401, String(e));
}
console.log(`test_openai: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
