// A reasoning model's thought through the official `@anthropic-ai/sdk`: the thinking block,
// whole and streamed (thinking_delta, signature_delta, then the text block), on a `recur serve`
// whose template opens the thought (run by test_serve_think_apis.py, which writes the
// expectation).
//   node tests/serve/anthropic/thinking.mjs BASE_URL EXPECTED_JSON_FILE
// EXPECTED_JSON_FILE: {"input", "max": max_tokens, "reasoning": chat's greedy
// reasoning_content for that input, "content": chat's content}.
import { readFileSync } from "node:fs";
import Anthropic from "@anthropic-ai/sdk";

const [baseURL, expectedFile] = process.argv.slice(2);
const want = JSON.parse(readFileSync(expectedFile, "utf8"));
const client = new Anthropic({ baseURL, apiKey: "none", maxRetries: 0, timeout: 60000 });
let passed = 0, failed = 0;
function check(name, cond, detail = "") {
  if (cond) passed++;
  else { failed++; console.error(`FAILED: ${name} ${detail}`); }
}
const J = JSON.stringify;
const body = { model: "recur", max_tokens: want.max, temperature: 0,
               thinking: { type: "enabled", budget_tokens: want.max },
               messages: [{ role: "user", content: want.input }] };

const m = await client.messages.create(body);
check("a thinking block, then the text block", m.content.length === 2 && m.content[0].type === "thinking" &&
  m.content[1].type === "text", J(m.content));
check("the thinking is chat's reasoning_content, with a signature string",
  m.content[0].thinking === want.reasoning && typeof m.content[0].signature === "string", J(m.content[0]));
check("the text is chat's content", m.content[1].text === want.content, J(m.content[1]));

// streamed, through the messages.stream helper
const stream = client.messages.stream(body);
let thought = "", text = "", sig = 0;
stream.on("thinking", (delta) => { thought += delta; });
stream.on("text", (delta) => { text += delta; });
stream.on("signature", () => { sig++; });
const fin = await stream.finalMessage();
check("thinking deltas join to chat's reasoning_content", thought === want.reasoning, J(thought));
check("text deltas join to chat's content", text === want.content, J(text));
check("one signature", sig === 1, String(sig));
check("finalMessage: the same blocks as the whole answer", J(fin.content) === J(m.content), J(fin.content));

// the assistant turn sent back as the SDK gives it (thinking block and all): accepted
const next = await client.messages.create({ ...body, thinking: undefined, max_tokens: 2,
  messages: [...body.messages, { role: "assistant", content: m.content }, { role: "user", content: "Another." }] });
check("the answer sent back with its thinking block is accepted", next.type === "message", J(next));

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : passed ? 0 : 1);
