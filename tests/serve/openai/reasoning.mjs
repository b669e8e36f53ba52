// A reasoning model's thought through the official `openai` package's Responses API: the
// reasoning output item, whole and streamed (its typed events), on a `recur serve` whose
// template opens the thought (run by test_serve_think_apis.py, which writes the expectation).
//   node tests/serve/openai/reasoning.mjs BASE_URL EXPECTED_JSON_FILE
// EXPECTED_JSON_FILE: {"input", "max": max_output_tokens, "reasoning": chat's greedy
// reasoning_content for that input, "content": chat's content}.
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const [baseURL, expectedFile] = process.argv.slice(2);
const want = JSON.parse(readFileSync(expectedFile, "utf8"));
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 60000 });
let passed = 0, failed = 0;
function check(name, cond, detail = "") {
  if (cond) passed++;
  else { failed++; console.error(`FAILED: ${name} ${detail}`); }
}
const J = JSON.stringify;
const body = { model: "recur", input: want.input, max_output_tokens: want.max, temperature: 0 };

// whole
const r = await client.responses.create(body);
const rs = r.output.find((o) => o.type === "reasoning");
check("a reasoning item first", r.output[0] === rs && /^rs_/.test(rs.id), J(r.output));
check("its reasoning_text is chat's reasoning_content",
  rs && rs.content.length === 1 && rs.content[0].type === "reasoning_text" && rs.content[0].text === want.reasoning,
  J(rs));
check("output_text (the SDK's) is chat's content, not the thought", r.output_text === want.content, J(r.output_text));
check("reasoning_tokens counted", r.usage.output_tokens_details.reasoning_tokens > 0, J(r.usage));

// streamed: the SDK's event stream and its final response
const stream = client.responses.stream(body);
let thought = "", text = "";
const types = [];
for await (const ev of stream) {
  types.push(ev.type);
  if (ev.type === "response.reasoning_text.delta") thought += ev.delta;
  if (ev.type === "response.output_text.delta") text += ev.delta;
}
const fin = await stream.finalResponse();
check("streamed reasoning deltas join to chat's reasoning_content", thought === want.reasoning, J(thought));
check("streamed text deltas join to chat's content", text === want.content, J(text));
check("reasoning_text.done before the message is added",
  types.indexOf("response.reasoning_text.done") >= 0 &&
  types.indexOf("response.reasoning_text.done") < types.lastIndexOf("response.output_item.added"), J(types));
check("finalResponse: the reasoning item and the message",
  fin.output.length === 2 && fin.output[0].type === "reasoning" && fin.output[0].content[0].text === want.reasoning &&
  fin.output_text === want.content, J(fin.output));

// sent back as input (a client that keeps the conversation): accepted, the thought left out
const again = await client.responses.create({
  model: "recur", max_output_tokens: 2, temperature: 0,
  input: [{ role: "user", content: want.input }, ...r.output, { role: "user", content: "Another." }],
});
check("the previous output items sent back as input are accepted", again.status !== "failed", J(again.status));

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : passed ? 0 : 1);
