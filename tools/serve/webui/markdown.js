// A small markdown renderer for the model's answers, which are untrusted text.
//
// It builds DOM nodes and never parses HTML: every piece of the text goes into the page as a
// text node, so `<script>`, `<img onerror=...>` or an attribute in the text stays text. Links
// keep only http:, https: and mailto: addresses (no javascript:, no data:). What it reads:
// fenced code blocks (``` or ~~~, with a language name; an unclosed one, as while streaming,
// runs to the end), # headings, > quotes, - * + and 1. lists (nested by indentation), ---
// rules, paragraphs (a line break stays a line break: chat answers are written that way),
// and inline `code`, **strong**, *emphasis*, ~~strike~~, [links](https://...) and
// <https://...>. Anything else is shown as it is.

const LIST = /^( {0,3})([-*+]|\d{1,9}[.)])[ \t]+(.*)$/;
const FENCE = /^ {0,3}(`{3,}|~{3,})[ \t]*([\w+#.-]*)/;
const HEADING = /^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}>/;
const BLANK = /^\s*$/;

// One alternative per construct; the groups are read in inline() below.
const INLINE = new RegExp(
  [
    /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/.source, // 1, 2: code
    /\*\*(?=\S)([\s\S]*?\S)\*\*/.source, // 3: strong
    /(?<![\p{L}\p{N}])__(?=\S)([\s\S]*?\S)__(?![\p{L}\p{N}])/.source, // 4: strong
    /~~(?=\S)([\s\S]*?\S)~~/.source, // 5: strike
    /\*(?=[^\s*])([\s\S]*?[^\s*])\*/.source, // 6: emphasis
    /(?<![\p{L}\p{N}])_(?=[^\s_])([\s\S]*?[^\s_])_(?![\p{L}\p{N}])/.source, // 7: emphasis
    /\[([^\]\n]*)\]\([ \t]*<?([^\s)>]+)>?(?:[ \t]+"[^"\n]*")?[ \t]*\)/.source, // 8, 9: link
    /<((?:https?:\/\/|mailto:)[^\s<>]+)>/.source, // 10: autolink
  ].join("|"),
  "u",
);

function el(tag, text) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  return e;
}

// The address when it is http:, https: or mailto:, else null (then the link is shown as text).
export function safeUrl(raw) {
  let u;
  try {
    u = new URL(raw, document.baseURI);
  } catch {
    return null;
  }
  return u.protocol === "http:" || u.protocol === "https:" || u.protocol === "mailto:" ? u.href : null;
}

function link(text, url, parent, whole) {
  const href = safeUrl(url);
  if (!href) {
    parent.append(whole);
    return;
  }
  const a = el("a");
  a.href = href;
  a.rel = "noopener noreferrer nofollow";
  a.target = "_blank";
  inline(text || url, a);
  parent.append(a);
}

function inline(text, parent) {
  while (text) {
    const m = INLINE.exec(text);
    if (!m) {
      parent.append(text); // a string is appended as a text node
      return;
    }
    if (m.index) parent.append(text.slice(0, m.index));
    if (m[1] !== undefined) {
      // one space on each side is padding, as in CommonMark
      const code = /^ .* $/s.test(m[2]) && m[2].trim() ? m[2].slice(1, -1) : m[2];
      parent.append(el("code", code));
    } else if (m[3] !== undefined || m[4] !== undefined) {
      const b = el("strong");
      inline(m[3] ?? m[4], b);
      parent.append(b);
    } else if (m[5] !== undefined) {
      const s = el("del");
      inline(m[5], s);
      parent.append(s);
    } else if (m[6] !== undefined || m[7] !== undefined) {
      const i = el("em");
      inline(m[6] ?? m[7], i);
      parent.append(i);
    } else if (m[9] !== undefined) {
      link(m[8], m[9], parent, m[0]);
    } else {
      link("", m[10], parent, m[0]);
    }
    text = text.slice(m.index + m[0].length);
  }
}

function codeBlock(code, lang) {
  const wrap = el("div");
  wrap.className = "code-block";
  const bar = el("div");
  bar.className = "code-bar";
  bar.append(el("span", lang || "text"));
  const copy = el("button", "Copy");
  copy.type = "button";
  copy.className = "copy-code";
  copy.setAttribute("aria-label", "Copy the code");
  bar.append(copy);
  const pre = el("pre");
  pre.append(el("code", code));
  wrap.append(bar, pre);
  return wrap;
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || LIST.test(line);
}

function list(lines, i, parent) {
  const first = LIST.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const l = el(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) l.start = parseInt(first[2], 10);
  while (i < lines.length) {
    const m = LIST.exec(lines[i]);
    if (!m || /\d/.test(m[2]) !== ordered || m[1].length > first[1].length) break;
    const item = [m[3]];
    i++;
    // the item's own lines: indented past its marker (a nested list among them)
    while (i < lines.length && !BLANK.test(lines[i]) && /^(?: {2,}|\t)/.test(lines[i]))
      item.push(lines[i++].replace(/^(?: {1,4}|\t)/, ""));
    const li = el("li");
    if (item.length === 1) inline(item[0], li);
    else blocks(item, li);
    l.append(li);
    // a blank line between two items keeps the list going
    if (i + 1 < lines.length && BLANK.test(lines[i]) && LIST.test(lines[i + 1])) i++;
  }
  parent.append(l);
  return i;
}

function blocks(lines, parent) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (BLANK.test(line)) {
      i++;
    } else if ((m = FENCE.exec(line))) {
      const close = new RegExp(`^ {0,3}${m[1][0] === "`" ? "`" : "~"}{${m[1].length},}[ \\t]*$`);
      const body = [];
      for (i++; i < lines.length && !close.test(lines[i]); i++) body.push(lines[i]);
      i++; // the closing fence
      parent.append(codeBlock(body.join("\n"), m[2]));
    } else if ((m = HEADING.exec(line))) {
      const h = el(`h${m[1].length}`);
      inline(m[2], h);
      parent.append(h);
      i++;
    } else if (RULE.test(line)) {
      parent.append(el("hr"));
      i++;
    } else if (QUOTE.test(line)) {
      const inner = [];
      while (i < lines.length && QUOTE.test(lines[i])) inner.push(lines[i++].replace(/^ {0,3}> ?/, ""));
      const q = el("blockquote");
      blocks(inner, q);
      parent.append(q);
    } else if (LIST.test(line)) {
      i = list(lines, i, parent);
    } else {
      const p = el("p");
      let first = true;
      do {
        if (!first) p.append(el("br"));
        inline(lines[i++], p);
        first = false;
      } while (i < lines.length && !BLANK.test(lines[i]) && !startsBlock(lines[i]));
      parent.append(p);
    }
  }
}

// The markdown text as a DocumentFragment of safe nodes.
export function renderMarkdown(text) {
  const frag = document.createDocumentFragment();
  blocks(String(text).replace(/\r\n?/g, "\n").split("\n"), frag);
  return frag;
}
