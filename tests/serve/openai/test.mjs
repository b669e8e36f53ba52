// The official `openai` npm package as a real client of `recur serve`:
//   node tests/serve/openai/test.mjs BASE_URL API_KEY EXPECTED_TEXT_FILE
// completions (whole and streamed) give the expected greedy text; chat completions (whole,
// streamed, n > 1, logprobs) answer what a completion of the same chat rendered as chatml
// (the shipped model has no template) answers; the server's errors surface as the package's
// error classes.
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
// chat: the expected reply is the greedy completion of the chatml text, up to its end of turn
const question = "Tell me a fortune.";
const chatml = `<|im_start|>user\n${question}<|im_end|>\n<|im_start|>assistant\n`;
const raw = await client.completions.create({ model: "recur", prompt: chatml, max_tokens: 12, temperature: 0 });
const reply = raw.choices[0].text.split("<|im_end|>")[0];
const messages = [{ role: "user", content: question }];
const cc = await client.chat.completions.create({ model: "recur", messages, max_tokens: 12, temperature: 0, n: 2, logprobs: true, top_logprobs: 2 });
check("chat object", cc.object === "chat.completion" && cc.choices.length === 2);
check("chat reply", cc.choices.every((ch) => ch.message.role === "assistant" && ch.message.content === reply),
      JSON.stringify(cc.choices.map((ch) => ch.message)) + " vs " + JSON.stringify(reply));
const lps = cc.choices[0].logprobs?.content ?? [];
check("chat logprobs", lps.length === cc.usage.completion_tokens / 2 && lps.every((t) => t.logprob <= 0 &&
      t.top_logprobs.length === 2 && t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob) &&
      lps.map((t) => t.token).join("") === reply, JSON.stringify(lps.slice(0, 2)));
const cs = await client.chat.completions.create({ model: "recur", messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } });
let streamed = "", role = "", finish = "", usage = null, roleContent, fingerprints = new Set();
for await (const chunk of cs) {
  if (chunk.usage) usage = chunk.usage;
  fingerprints.add(chunk.system_fingerprint);
  for (const ch of chunk.choices) {
    if (ch.delta.role) roleContent = ch.delta.content;
    if (ch.delta.role) role = ch.delta.role;
    if (ch.delta.content) streamed += ch.delta.content;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
}
check("streamed chat", streamed === reply && role === "assistant" && (finish === "length" || finish === "stop"),
      JSON.stringify([streamed, role, finish]));
check("the role chunk's content is null, as OpenAI's", roleContent === null, JSON.stringify(roleContent));
check("one system_fingerprint, the whole answer's", fingerprints.size === 1 &&
      [...fingerprints][0] === cc.system_fingerprint && /^b[0-9.]+-[0-9a-f]{16}$/.test(cc.system_fingerprint),
      JSON.stringify([...fingerprints, cc.system_fingerprint]));
check("streamed chat usage", usage && usage.prompt_tokens > 0 && usage.completion_tokens > 0, JSON.stringify(usage));
// structured output: the answer holds only what the schema allows (a cut one is a prefix)
const schema = { type: "object", properties: { answer: { enum: ["yes", "no"] } }, required: ["answer"], additionalProperties: false };
const sj = await client.chat.completions.create({
  model: "recur", messages, max_tokens: 40, seed: 1,
  response_format: { type: "json_schema", json_schema: { name: "a", strict: true, schema } } });
const sjText = sj.choices[0].message.content;
check("response_format json_schema: the schema's characters only",
      /^[{}":answeryno \t\n\r]*$/.test(sjText) && sjText.trimStart().startsWith("{"), JSON.stringify(sjText));
if (sj.choices[0].finish_reason === "stop")
  check("response_format json_schema: a finished answer parses", ["yes", "no"].includes(JSON.parse(sjText).answer), sjText);
try {
  await client.chat.completions.create({ model: "recur", messages, response_format: { type: "xml" } });
  check("an unknown response_format is refused", false);
} catch (e) {
  check("response_format: BadRequestError naming it", e instanceof OpenAI.BadRequestError && /response_format/.test(e.message), String(e));
}
console.log(`test_openai: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
