// Every element is built with createElement and textContent: what the API returns (a machine's
// hostname, an attestor's message) is text, never markup. The page's CSP requires Trusted Types,
// so an accidental innerHTML would throw rather than parse.

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "text") el.textContent = value;
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "value") el.value = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

let unique = 0;
export function uid(prefix) {
  unique += 1;
  return `${prefix}-${unique}`;
}

// A labelled control: <label for> + the control, so every field has a name.
export function field(label, control, hint) {
  control.id ||= uid("f");
  const parts = [h("label", { for: control.id, text: label }), control];
  if (hint) {
    const hintEl = h("p", { class: "hint", id: uid("hint"), text: hint });
    control.setAttribute("aria-describedby", hintEl.id);
    parts.push(hintEl);
  }
  return h("div", { class: "field" }, parts);
}

export function select(options, value, props = {}) {
  const el = h("select", props);
  for (const option of options) {
    const [optionValue, text] = Array.isArray(option) ? option : [option, option];
    el.append(h("option", { value: optionValue, text, selected: optionValue === value }));
  }
  return el;
}

// A table whose rows become labelled cards on a phone: each cell carries its column's name.
// Roles are explicit because some browsers drop table semantics once CSS changes `display`.
export function table(caption, columns, rows) {
  const head = h("tr", { role: "row" }, columns.map((c) => h("th", { scope: "col", role: "columnheader", text: c })));
  return h(
    "table",
    { role: "table", class: "grid" },
    h("caption", {}, words(caption)),
    h("thead", { role: "rowgroup" }, head),
    h("tbody", { role: "rowgroup" }, rows),
  );
}

export function row(columns, cells, props = {}) {
  return h(
    "tr",
    { role: "row", ...props },
    cells.map((cell, i) => h("td", { role: "cell", "data-label": columns[i] }, typeof cell === "string" ? words(cell) : cell)),
  );
}

// Text laid out word by word: a line breaks between words, never inside one (not even at a
// hyphen, where a browser would break "gpu-rack-1" or "Appro-ve"); on a phone a word too long for
// the screen still wraps rather than widening the page (console.css).
export function words(text) {
  return String(text)
    .split(/(\s+)/)
    .filter((part) => part)
    .map((part) => (/^\s+$/.test(part) ? " " : h("span", { class: "word", text: part })));
}

// A hostname may also break after each of its dots, between its labels.
export function hostname(name) {
  const labels = String(name).split(".");
  return h(
    "span",
    { class: "hostname" },
    labels.map((label, i) => (i < labels.length - 1 ? [h("span", { class: "word", text: `${label}.` }), h("wbr")] : h("span", { class: "word", text: label }))),
  );
}

export function announce(text) {
  const region = document.getElementById("announce");
  region.textContent = "";
  // A changed text node is what screen readers announce: set it on the next frame.
  requestAnimationFrame(() => {
    region.textContent = text;
  });
}
