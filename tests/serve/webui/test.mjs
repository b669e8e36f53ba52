// recur serve's web page in a real browser: Debian's chromium driven by playwright-core,
// against a live `recur serve` on the given model.
//   node tests/serve/webui/test.mjs RECUR_BIN MODEL OUT_DIR
// Prints each check; screenshots (PNG) go to OUT_DIR. Exit 0: every check passed; 1: one
// failed; 77 (ctest's SKIP_RETURN_CODE): it cannot run here (no playwright-core or no
// chromium), nothing counted as passed.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";

const [recur, model, outDir] = process.argv.slice(2);
if (!recur || !model || !outDir) {
  console.error("usage: test.mjs RECUR_BIN MODEL OUT_DIR");
  process.exit(2);
}
let pw;
try {
  pw = await import("playwright-core");
} catch {
  console.log("SKIP: playwright-core is not installed (scripts/setup.sh runs npm ci in tests/serve/webui)");
  process.exit(77);
}
const chromiumPath = process.env.RECUR_CHROMIUM ?? ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));
if (!chromiumPath) {
  console.log("SKIP: no chromium (Debian's package chromium; scripts/setup.sh installs it)");
  process.exit(77);
}
mkdirSync(outDir, { recursive: true });
rmSync(join(outDir, "webui-failure.png"), { force: true }); // a past run's

let passed = 0, failed = 0;
function check(name, cond, detail = "") {
  if (cond) {
    passed++;
    console.log(`ok: ${name}`);
  } else {
    failed++;
    console.log(`FAILED: ${name} ${detail}`);
  }
}

const KEY = "webui-test-key";
const T = 60000; // the longest wait for one step (the sanitizer build is slow)

// `recur serve` on port (0: a free one), with extra flags; resolves when it listens.
function startServer(port, extra = []) {
  const proc = spawn(recur, ["serve", "-m", model, "--port", String(port), "-t", "2", "-np", "2", "--api-key", KEY,
    "--max-tokens", "100000", ...extra],
    { stdio: ["ignore", "ignore", "pipe"] });
  return new Promise((resolve, reject) => {
    let buf = "";
    const onData = (d) => {
      buf += d;
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(buf);
      if (m) {
        proc.stderr.off("data", onData);
        proc.stderr.resume(); // keep draining
        resolve({ proc, port: Number(m[1]) });
      }
    };
    proc.stderr.setEncoding("utf8");
    proc.stderr.on("data", onData);
    proc.on("exit", (code) => reject(new Error(`recur serve exited (${code}): ${buf}`)));
  });
}

let server = await startServer(0);
const base = `http://127.0.0.1:${server.port}`;
const api = async (path) => (await fetch(base + path, { headers: { Authorization: `Bearer ${KEY}` } })).json();

const browser = await pw.chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"], headless: true });
const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme: "light" });
await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: base });
const page = await context.newPage();
page.setDefaultTimeout(T);

// console errors: a failed request the test causes on purpose (401 before the key is set,
// 400 for a refused setting, the server killed) is logged by chromium as "Failed to load
// resource"; those are expected only while `expected` says so, any other error is a failure
const consoleErrors = [], pageErrors = [];
let expected = null;
page.on("console", (m) => {
  if (m.type() !== "error") return;
  const text = m.text();
  if (expected && expected.test(text)) console.log(`   (expected console message: ${text})`);
  else consoleErrors.push(text);
});
page.on("pageerror", (e) => pageErrors.push(String(e)));
const requests = [];
page.on("request", (r) => {
  if (r.method() !== "POST") return;
  try {
    requests.push({ path: new URL(r.url()).pathname, body: JSON.parse(r.postData() ?? "null"), headers: r.headers() });
  } catch {
    requests.push({ path: new URL(r.url()).pathname, body: null, headers: r.headers() });
  }
});
const lastRequest = (path) => requests.filter((r) => r.path === path).at(-1);

const shot = async (name) => {
  const file = join(outDir, name);
  await page.screenshot({ path: file });
  console.log(`   screenshot: ${file}`);
};
const assistant = (i) => page.locator(".msg.assistant").nth(i);
const lastAssistant = () => page.locator(".msg.assistant").last();
async function setSetting(id, value) {
  await page.click("#tab-settings");
  await page.fill(`#${id}`, value);
  await page.click("#tab-chat");
}
async function sendChat(text) {
  await page.fill("#chat-input", text);
  await page.press("#chat-input", "Enter");
}
const waitState = (loc, states) => loc.and(page.locator(states.map((s) => `[data-state="${s}"]`).join(","))).waitFor();
const slotsBusy = async () => (await api("/slots")).some((s) => s.is_processing);

try {
  // ---- the page loads; it needs no key, its requests do ---------------------------------------
  expected = /status of 401/;
  const resp = await page.goto(base + "/");
  check("the page loads without the API key", resp.status() === 200 && (await page.title()) === "recur", resp.status());
  await page.waitForSelector("html[data-ready=true]");
  await page.locator("#banner:not([hidden])").waitFor();
  const bannerText = await page.textContent("#banner-text");
  check("without the key: the 401 of /props is shown", /401/.test(bannerText) && /API key/.test(bannerText), bannerText);
  await page.click("#tab-settings");
  await page.fill("#set-api-key", KEY);
  await page.press("#set-api-key", "Tab"); // a change event: /props is asked again, with the key
  expected = null;
  await page.locator('#model-info [data-key="architecture"]').waitFor();
  const props = await api("/props");
  const info = await page.textContent("#model-info");
  check("the model's name, architecture, parameters, size and state from /props",
    info.includes(props.model_alias) && info.includes(props.recur.architecture) && /parameters \d/.test(info) &&
      /size [\d.]+ MiB/.test(info) && /state [\d.]+ KiB \/ sequence/.test(info), info);
  check("/props has the model's size and parameters", props.recur.model_size > 0 && props.recur.n_params > 0 &&
    props.recur.model_size >= props.recur.n_params, JSON.stringify(props.recur));
  await page.click("#banner-close");

  // ---- settings: temperature and length ---------------------------------------------------------
  await page.fill("#set-temperature", "0.3");
  await page.fill("#set-max-tokens", "48");
  await shot("webui-settings.png");
  await page.click("#tab-chat");

  // ---- a message, streamed ---------------------------------------------------------------------
  await page.evaluate(() => {
    // every change of the newest answer's text while it streams
    window.__lens = [];
    new MutationObserver(() => {
      const c = [...document.querySelectorAll(".msg.assistant .content")].at(-1);
      if (c && c.closest(".msg").dataset.state === "streaming") window.__lens.push(c.textContent.length);
    }).observe(document.getElementById("messages"), { subtree: true, childList: true, characterData: true });
  });
  await sendChat("Tell me a fortune.");
  await waitState(assistant(0), ["done"]);
  const lens = await page.evaluate(() => window.__lens);
  const distinct = new Set(lens.filter((n) => n > 0));
  check("the answer streams: its text grew in more than one update", distinct.size > 1, JSON.stringify(lens));
  const answer1 = await assistant(0).locator(".content").textContent();
  check("the answer has text", answer1.length > 0);
  const req1 = lastRequest("/v1/chat/completions");
  check("the chat request streams, with the temperature and length of the settings",
    req1?.body?.stream === true && req1.body.temperature === 0.3 && req1.body.max_tokens === 48 &&
      req1.body.messages?.at(-1)?.content === "Tell me a fortune.", JSON.stringify(req1?.body));
  check("the request sends the key", req1?.headers?.authorization === `Bearer ${KEY}`, JSON.stringify(req1?.headers));
  const stats1 = await assistant(0).locator(".stats").textContent();
  const nTok1 = Number(/^(\d+) tokens/.exec(stats1)?.[1] ?? 0); // 48, or fewer if the model ended
  check("numbers: tokens, tokens/s, time to first token, prompt tokens from the cache",
    nTok1 > 0 && nTok1 <= 48 && /[\d.]+ tokens\/s/.test(stats1) && /first token \d+ ms/.test(stats1) &&
      /\d+ of \d+ prompt tokens reused from the cache/.test(stats1), stats1);
  const tags = await assistant(0).locator(".content *").evaluateAll((els) => [...new Set(els.map((e) => e.tagName))]);
  const allowed = new Set(["P", "BR", "STRONG", "EM", "DEL", "CODE", "PRE", "A", "UL", "OL", "LI", "BLOCKQUOTE", "H1", "H2", "H3", "H4", "H5", "H6", "HR", "DIV", "SPAN", "BUTTON"]);
  check("the model's text made only the renderer's elements", tags.every((t) => allowed.has(t)), JSON.stringify(tags));

  // a second turn: the conversation so far is reused from the prefix cache
  await sendChat("And another one?");
  await waitState(assistant(1), ["done"]);
  const stats2 = await assistant(1).locator(".stats").textContent();
  const cached = Number(/(\d+) of \d+ prompt tokens reused/.exec(stats2)?.[1] ?? 0);
  check("the second turn reuses the first from the cache", cached > 0, stats2);
  const req2 = lastRequest("/v1/chat/completions");
  // the rendered answer's text is the sent one less its white space's layout: line breaks
  // became <br>, and the renderer drops white space at the end (a sampled answer may end in tabs)
  const squeeze = (t) => t.replace(/\s+/g, "");
  check("the second request carries the history", req2?.body?.messages?.length === 3 &&
    req2.body.messages[1].role === "assistant" &&
    squeeze(req2.body.messages[1].content) === squeeze(answer1), JSON.stringify([req2?.body?.messages, answer1]));

  await shot("webui-chat-light.png"); // docs/webui.png is this one
  // keyboard: Shift+Enter is a new line, not a send
  const nBefore = await page.locator(".msg").count();
  await page.fill("#chat-input", "line one");
  await page.press("#chat-input", "Shift+Enter");
  await page.keyboard.type("line two");
  check("Shift+Enter: a new line, nothing sent", (await page.inputValue("#chat-input")) === "line one\nline two" &&
    (await page.locator(".msg").count()) === nBefore);
  await page.fill("#chat-input", "");

  // copy an answer
  await assistant(0).locator(".copy").click();
  const clip = await page.evaluate(() => navigator.clipboard.readText());
  check("Copy puts the answer's text on the clipboard", clip.length > 0 && clip.replace(/\s+/g, "") === answer1.replace(/\s+/g, ""),
    JSON.stringify([clip.slice(0, 80), answer1.slice(0, 80)]));

  // ---- regenerate, edit and resend, system prompt ----------------------------------------------
  const nReq = requests.length;
  await assistant(1).locator(".regenerate").click();
  await waitState(assistant(1), ["done"]);
  const reqR = lastRequest("/v1/chat/completions");
  check("Regenerate asks again for the last answer", requests.length > nReq && (await page.locator(".msg").count()) === 4 &&
    reqR.body.messages.length === 3 && reqR.body.messages.at(-1).content === "And another one?", JSON.stringify(reqR?.body?.messages));
  await page.locator(".msg.user").first().locator(".edit").click();
  await page.fill(".edit-area", "What does the future hold?");
  await page.press(".edit-area", "Enter");
  await waitState(assistant(0), ["done"]);
  const reqE = lastRequest("/v1/chat/completions");
  check("Edit and resend: the conversation restarts from the edited message",
    (await page.locator(".msg").count()) === 2 && reqE.body.messages.length === 1 &&
      reqE.body.messages[0].content === "What does the future hold?" &&
      (await page.locator(".msg.user .content").first().textContent()) === "What does the future hold?",
    JSON.stringify(reqE?.body?.messages));
  await page.click("#system-box summary");
  await page.fill("#system-prompt", "You tell fortunes.");
  await sendChat("Will it rain?");
  await waitState(assistant(1), ["done"]);
  const reqS = lastRequest("/v1/chat/completions");
  check("the system prompt leads the messages", reqS.body.messages[0].role === "system" &&
    reqS.body.messages[0].content === "You tell fortunes." && reqS.body.messages.length === 4, JSON.stringify(reqS?.body?.messages));

  // ---- stop mid-stream frees the slot ------------------------------------------------------------
  // 50,000 tokens: some 40 s of this model on 2 threads, so that a loaded machine's slow clicks
  // still land while it streams (4,000 took 3 s, and once ended before the click)
  await setSetting("set-max-tokens", "50000");
  await sendChat("Tell me a long story.");
  const streaming = assistant(2);
  await page.waitForFunction(() => {
    const c = [...document.querySelectorAll(".msg.assistant .content")].at(-1);
    return c && c.textContent.length > 40;
  });
  check("while it streams, a slot is processing", await slotsBusy());
  check("the Stop button shows while it streams", await page.isVisible("#stop"));
  await page.click("#stop");
  await waitState(streaming, ["stopped"]);
  let freed = false;
  for (let i = 0; i < 100 && !freed; i++) {
    freed = !(await slotsBusy());
    if (!freed) await new Promise((r) => setTimeout(r, 100));
  }
  check("Stop: /slots shows every slot free", freed);
  const m = await (await fetch(base + "/metrics", { headers: { Authorization: `Bearer ${KEY}` } })).text();
  const generated = Number(/^llamacpp:tokens_predicted_total (\S+)$/m.exec(m)?.[1] ?? NaN);
  check("Stop: generation ended well before the 50,000 tokens asked", generated < 50000, String(generated));
  const stoppedStats = await streaming.locator(".stats").textContent();
  check("the stopped answer keeps its text and says stopped, with its length and speed",
    (await streaming.locator(".content").textContent()).length > 40 && /stopped/.test(stoppedStats) &&
      /about \d+ tokens/.test(stoppedStats) && /tokens\/s/.test(stoppedStats), stoppedStats);
  check("Send is back after Stop", (await page.isVisible("#send")) && !(await page.isVisible("#stop")));

  // ---- reload: the conversation is kept -----------------------------------------------------------
  const before = await page.locator(".msg .content").allTextContents();
  await page.reload();
  await page.waitForSelector("html[data-ready=true]");
  const after = await page.locator(".msg .content").allTextContents();
  const convTitles = await page.locator("#conv-list .conv-open").allTextContents();
  check("after a reload the conversation is listed and shown as it was",
    convTitles.length === 1 && convTitles[0] === "Tell me a fortune." &&
      after.length === before.length && after.every((t, i) => t === before[i]), JSON.stringify({ convTitles, n: [before.length, after.length] }));
  check("after a reload the settings are kept", (await page.inputValue("#set-temperature")) === "0.3");
  await page.click("#new-chat");
  check("New chat: an empty conversation", (await page.locator(".msg").count()) === 0);
  await setSetting("set-max-tokens", "24");
  await sendChat("A second conversation");
  await waitState(assistant(0), ["done"]);
  check("two conversations in the sidebar", (await page.locator("#conv-list .conv").count()) === 2);
  await page.locator("#conv-list .conv-open", { hasText: "Tell me a fortune." }).click();
  check("the sidebar switches conversations", (await page.locator(".msg").count()) === 6);

  // ---- the renderer: markdown, and model text never becomes markup -------------------------------
  const md = await page.evaluate(async () => {
    const { renderMarkdown } = await import("/webui/markdown.js");
    const d = document.createElement("div");
    d.append(renderMarkdown("<img src=x onerror=\"window.__xss=1\"> **bold** *em* `co<de>`\n" +
      "[bad](javascript:window.__xss=2) [good](https://example.org/a?b=1) <script>window.__xss=3</script>\n\n" +
      "- one\n- two\n\n```js\nlet a = \"<b>\";\n```\n# Title"));
    return {
      img: d.querySelectorAll("img, script").length, strong: d.querySelector("strong")?.textContent,
      em: d.querySelector("em")?.textContent, code: d.querySelector("p code")?.textContent,
      links: [...d.querySelectorAll("a")].map((a) => a.href), items: d.querySelectorAll("li").length,
      pre: d.querySelector("pre")?.textContent, copy: d.querySelectorAll(".code-block .copy-code").length,
      h1: d.querySelector("h1")?.textContent, text: d.textContent, xss: window.__xss ?? null,
    };
  });
  check("markdown: strong, emphasis, code, a list, a heading", md.strong === "bold" && md.em === "em" &&
    md.code === "co<de>" && md.items === 2 && md.h1 === "Title", JSON.stringify(md));
  check("markdown: a code block with a copy button", md.pre === 'let a = "<b>";' && md.copy === 1, JSON.stringify(md));
  check("markdown: HTML in the text stays text", md.img === 0 && md.text.includes("<img src=x") && md.text.includes("<script>") &&
    md.xss === null, JSON.stringify(md));
  check("markdown: only http(s) links", md.links.length === 1 && md.links[0] === "https://example.org/a?b=1", JSON.stringify(md.links));

  // ---- a setting the server refuses: its 400 is shown ---------------------------------------------
  await setSetting("set-top-p", "7");
  expected = /status of 400/;
  await sendChat("This one is refused");
  await waitState(lastAssistant(), ["error"]);
  const err400 = await lastAssistant().locator(".error").textContent();
  check("a refused setting: the server's 400 and its message are shown", /400/.test(err400) && /top_p/.test(err400), err400);
  expected = null;
  await setSetting("set-top-p", "");

  // ---- the playground: n-best and probabilities ---------------------------------------------------
  await page.click("#tab-settings");
  await page.check("#set-ignore-eos"); // so that the continuation has all its 24 tokens
  await page.click("#tab-playground");
  await page.fill("#pg-prompt", "Once upon a time");
  await page.fill("#pg-nprobs", "3");
  await page.click("#pg-run");
  await page.locator("#pg-output[data-state=done]").waitFor();
  const reqP = lastRequest("/completion");
  check("the playground asks /completion, streamed, with n_probs and the settings",
    reqP?.body?.stream === true && reqP.body.n_probs === 3 && reqP.body.temperature === 0.3 && reqP.body.n_predict === 24 &&
      reqP.body.ignore_eos === true && reqP.body.prompt === "Once upon a time", JSON.stringify(reqP?.body));
  const toks = page.locator("#pg-output .tok");
  check("the continuation is shown token by token", (await toks.count()) === 24, String(await toks.count()));
  await toks.filter({ hasText: /\S/ }).first().hover(); // a token of spaces or a newline alone has no box to hover
  await page.locator("#pg-tip:not([hidden])").waitFor();
  const tip = await page.textContent("#pg-tip");
  check("hover: the token's probability and 3 alternatives", /%/.test(tip) && (await page.locator("#pg-tip li").count()) === 3, tip);
  const pgStats = await page.textContent("#pg-stats");
  check("playground numbers: tokens/s, prompt, cache, first token", /24 tokens/.test(pgStats) && /tokens\/s/.test(pgStats) &&
    /reused from the cache/.test(pgStats) && /first token/.test(pgStats), pgStats);
  await shot("webui-playground.png");
  await page.focus("#pg-output");
  await page.keyboard.press("Home");
  await page.keyboard.press("ArrowRight");
  check("keyboard: the arrow keys walk the tokens", (await page.locator("#pg-output .tok.selected").count()) === 1 &&
    (await page.isVisible("#pg-tip")));

  // ---- themes, and phone width --------------------------------------------------------------------
  await page.click("#tab-chat");
  const theme = () => page.evaluate(() => document.documentElement.dataset.theme);
  // the page follows a change of the system's theme as it comes (an event): waited for
  const themeBecomes = (t) => page.waitForFunction((t) => document.documentElement.dataset.theme === t, t, { timeout: 5000 })
    .then(() => true, () => false);
  check("light system theme: light page", (await theme()) === "light");
  await page.emulateMedia({ colorScheme: "dark" });
  check("dark system theme: dark page (prefers-color-scheme)", await themeBecomes("dark"), await theme());
  await shot("webui-chat-dark.png");
  await page.click("#theme-toggle"); // auto -> light
  check("the toggle: light against a dark system", (await theme()) === "light");
  await page.click("#theme-toggle"); // light -> dark
  await page.emulateMedia({ colorScheme: "light" });
  await page.waitForTimeout(300); // a media event that must not change the chosen theme
  check("the toggle: dark against a light system", (await theme()) === "dark");
  await page.click("#theme-toggle"); // dark -> auto
  check("the toggle: back to the system's", (await theme()) === "light");
  await page.setViewportSize({ width: 390, height: 844 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check("phone width: nothing wider than the screen", overflow <= 0, String(overflow));
  const sidebarBox = async () => page.evaluate(() => document.getElementById("sidebar").getBoundingClientRect().right);
  const sidebarAway = await page.waitForFunction(() => document.getElementById("sidebar").getBoundingClientRect().right <= 0,
    null, { timeout: 5000 }).then(() => true, () => false); // it slides away (a transition)
  check("phone width: the sidebar is out of the way", sidebarAway && (await page.isVisible("#sidebar-toggle")), String(await sidebarBox()));
  await shot("webui-phone.png");
  await page.click("#sidebar-toggle");
  await page.waitForFunction(() => document.getElementById("sidebar").getBoundingClientRect().left >= 0);
  check("phone width: the toggle opens the sidebar", (await sidebarBox()) > 100);
  await shot("webui-phone-sidebar.png");
  await page.keyboard.press("Escape");
  check("phone width: Escape closes the sidebar", await page.waitForFunction(
    () => document.getElementById("sidebar").getBoundingClientRect().right <= 0, null, { timeout: 5000 }).then(() => true, () => false));
  await page.setViewportSize({ width: 1280, height: 800 });

  // ---- the server goes away: connection lost, shown; the page goes on -----------------------------
  await setSetting("set-max-tokens", "50000");
  await sendChat("Keep going until the server is gone.");
  await page.waitForFunction(() => {
    const c = [...document.querySelectorAll(".msg.assistant .content")].at(-1);
    return c && c.textContent.length > 20;
  });
  expected = /ERR_CONNECTION_REFUSED|ERR_INCOMPLETE_CHUNKED_ENCODING|ERR_EMPTY_RESPONSE|ERR_CONNECTION_RESET|Failed to load resource/;
  const dead = new Promise((r) => server.proc.once("exit", r));
  server.proc.kill("SIGKILL");
  await dead;
  await waitState(lastAssistant(), ["error"]);
  const errMid = await lastAssistant().locator(".error").textContent();
  check("the server killed mid-answer: connection lost, shown", /Connection lost/.test(errMid), errMid);
  await sendChat("Anyone there?");
  await waitState(lastAssistant(), ["error"]);
  const errDown = await lastAssistant().locator(".error").textContent();
  check("the server down: cannot be reached, shown", /Connection lost: the server cannot be reached/.test(errDown), errDown);
  check("the page is alive after the errors", (await page.evaluate(() => 1 + 1)) === 2 && (await page.isEnabled("#chat-input")));
  expected = null;
  server = await startServer(new URL(base).port);
  await setSetting("set-max-tokens", "16");
  await setSetting("set-repeat-penalty", "1.1");
  await sendChat("Back again?");
  await waitState(lastAssistant(), ["done"]);
  check("a restarted server: the page works again", (await lastAssistant().locator(".content").textContent()).length > 0);
  const reqLast = lastRequest("/v1/chat/completions");
  check("the chat request leaves out what only the playground sends (ignore_eos is set), and has the repeat penalty",
    !("ignore_eos" in reqLast.body) && !("n_predict" in reqLast.body) && reqLast.body.max_tokens === 16 &&
      reqLast.body.repeat_penalty === 1.1, JSON.stringify(reqLast.body));

  // ---- a reasoning model's thought: DeepSeek-R1's template opens <think> in the prompt, so the
  // whole answer of a model that never closes it is reasoning_content: folded under "Thinking"
  const firstExit = await new Promise((r) => {
    server.proc.once("exit", (code, sig) => r(code ?? sig));
    server.proc.kill("SIGTERM");
  });
  check("the first server stops cleanly on SIGTERM", firstExit === 0, String(firstExit));
  server = await startServer(new URL(base).port, ["--chat-template", "deepseek-r1"]);
  await setSetting("set-temperature", "0");
  await page.click("#new-chat");
  await sendChat("Think about it.");
  await waitState(lastAssistant(), ["done"]);
  const shownThought = await lastAssistant().locator(".thinking .thought").textContent();
  const thinkingShown = await lastAssistant().locator(".thinking").isVisible();
  // the page's own request, asked again whole
  const { stream, stream_options, ...asked } = lastRequest("/v1/chat/completions").body;
  const direct = await (await fetch(base + "/v1/chat/completions", {
    method: "POST", headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
    body: JSON.stringify(asked),
  })).json();
  check("the page asked greedy, streamed", stream === true && asked.temperature === 0, JSON.stringify(asked));
  const want = direct.choices?.[0]?.message ?? {};
  check("a reasoning answer: its thought shown under Thinking, as the API's reasoning_content",
    thinkingShown && shownThought.length > 0 && shownThought === want.reasoning_content, JSON.stringify([shownThought, want]));
  check("... and its answer text is the API's content (none: the thought never closed)",
    (await lastAssistant().locator(".content").textContent()) === (want.content ?? ""), JSON.stringify(want));
  await shot("webui-thinking.png");
} catch (e) {
  check("the run went through", false, e.stack);
  await shot("webui-failure.png").catch(() => {});
}

check("no errors in the page (pageerror)", pageErrors.length === 0, JSON.stringify(pageErrors));
check("no console errors", consoleErrors.length === 0, JSON.stringify(consoleErrors));
await browser.close();
// SIGTERM drains and exits 0 (in the sanitizer build, also: LeakSanitizer found no leak)
const exitCode = await new Promise((r) => {
  server.proc.once("exit", (code, sig) => r(code ?? sig));
  server.proc.kill("SIGTERM");
});
check("the server stops cleanly on SIGTERM", exitCode === 0, String(exitCode));
console.log(`test_webui: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
