// The official `openai` npm package's tool calls against `recur serve` (run by
// tests/serve/test_serve_tools.py):
//   node tests/serve/openai/tools.mjs BASE_URL
// A forced call (tool_choice "required", one call) comes back as the package's typed
// tool_calls with JSON arguments; the same request streamed, put together by the package's own
// stream helper (beta.chat.completions.stream), gives the same calls; a history with the
// call and its result answers; a bad tool_choice is a BadRequestError naming it.
import OpenAI from "openai";

const [baseURL] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 120000 });
let passed = 0, failed = 0;
function check(name, cond, detail = "") {
  if (cond) passed++;
  else { failed++; console.error(`FAILED: ${name} ${detail}`); }
}

const tools = [{
  type: "function",
  function: {
    name: "get_time", description: "The time in a zone.",
    parameters: { type: "object", properties: { tz: { type: "string", enum: ["UTC", "CET"] } }, required: ["tz"] },
  },
}];
const messages = [{ role: "user", content: "What time is it in Paris?" }];
const body = { model: "recur", messages, tools, tool_choice: "required", parallel_tool_calls: false, max_tokens: 120, temperature: 0 };

const r = await client.chat.completions.create(body);
const msg = r.choices[0].message;
check("finish_reason tool_calls", r.choices[0].finish_reason === "tool_calls", r.choices[0].finish_reason);
check("one call", msg.tool_calls?.length === 1, JSON.stringify(msg));
const call = msg.tool_calls?.[0];
let args = null;
try { args = JSON.parse(call.function.arguments); } catch (e) { /* checked below */ }
check("the call: get_time with a tz of the enum", call?.type === "function" && call.function.name === "get_time" &&
      args && ["UTC", "CET"].includes(args.tz), JSON.stringify(call));
check("content null", msg.content === null, JSON.stringify(msg.content));

const stream = client.chat.completions.stream(body);
const final = await stream.finalChatCompletion();
const smsg = final.choices[0].message;
check("streamed: the same call", smsg.tool_calls?.length === 1 &&
      smsg.tool_calls[0].function.name === call?.function.name &&
      smsg.tool_calls[0].function.arguments === call?.function.arguments, JSON.stringify(smsg));
check("streamed: finish_reason", final.choices[0].finish_reason === "tool_calls", final.choices[0].finish_reason);

const next = await client.chat.completions.create({
  model: "recur", tools, max_tokens: 8, temperature: 0,
  messages: [...messages, msg, { role: "tool", tool_call_id: call?.id ?? "x", content: "14:05" }],
});
check("a history with the call and its result answers", typeof next.choices[0].message.content === "string",
      JSON.stringify(next.choices[0]));

try {
  await client.chat.completions.create({ ...body, tool_choice: { type: "function", function: { name: "nope" } } });
  check("an unknown function is refused", false);
} catch (e) {
  check("unknown function: BadRequestError naming it", e instanceof OpenAI.BadRequestError && /nope/.test(e.message), String(e));
}
console.log(`tools.mjs: ${passed} passed, ${failed} failed`);
process.exit(failed || !passed ? 1 : 0);
