// The generic rendering of a page with no aotui marks (sandbox/web_generic.py says how it is used).
// Evaluated by sandbox/web_generic.py in an isolated world of the page: the page's own scripts
// share its DOM but never see this object, its ids or its WeakMap, so a page cannot forge or
// redirect a ref. It walks the visible DOM and writes marked HTML that sandbox/render.py turns
// into Markdown: every element an agent can act on becomes entity="control:page[N]", N an id
// kept for the element's life in this document.
(() => {
  "use strict";
  if (globalThis.__aotuiGeneric) return;
  const doc = Math.random().toString(36).slice(2, 10);
  const ids = new WeakMap();
  const byId = new Map();
  // Elements with a click listener of the page's (sandbox/web_generic.py asks CDP for them).
  const listened = new WeakSet();
  let listenedCount = 0;
  let next = 0;
  const MAX_DEPTH = 200;
  const MAX_NAME = 120;
  // HTML tag names are upper case, SVG's as written: "title" and "style" are SVG's own.
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "HEAD", "META", "LINK",
    "IFRAME", "OBJECT", "EMBED", "CANVAS", "VIDEO", "AUDIO", "MAP", "DATALIST", "OPTION", "defs",
    "clipPath", "mask", "symbol", "marker", "pattern", "linearGradient", "radialGradient",
    "filter", "title", "desc", "metadata", "style", "script"]);
  const KEEP = new Set(["H1", "H2", "H3", "H4", "H5", "H6", "P", "UL", "OL", "LI", "DL", "DT",
    "DD", "TABLE", "THEAD", "TBODY", "TFOOT", "TR", "TD", "TH", "CAPTION", "BLOCKQUOTE", "PRE",
    "CODE", "KBD", "SAMP", "STRONG", "B", "EM", "I", "S", "DEL", "BR", "HR", "SECTION",
    "ARTICLE", "ASIDE", "NAV", "HEADER", "FOOTER", "MAIN", "FORM", "FIELDSET", "LEGEND",
    "FIGURE", "FIGCAPTION", "DETAILS", "SUMMARY", "ADDRESS"]);
  const ROLES = new Set(["button", "link", "checkbox", "radio", "switch", "tab", "menuitem",
    "menuitemcheckbox", "menuitemradio", "option", "textbox", "searchbox", "combobox",
    "slider", "spinbutton", "treeitem"]);
  const TEXT_INPUTS = new Set(["text", "search", "email", "url", "tel", "password", "number",
    "date", "time", "datetime-local", "month", "week", "color", "range"]);

  // Descendants that are controls of their own: a container holding one is not itself a control.
  const INNER = "a[href], button, input, select, textarea, [role], [tabindex], [contenteditable]";
  const escText = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const escAttr = (s) => escText(s).replace(/"/g, "&quot;");
  const clip = (s) => {
    const t = s.replace(/\s+/g, " ").trim();
    return t.length > MAX_NAME ? t.slice(0, MAX_NAME - 1) + "…" : t;
  };

  function idOf(el) {
    let id = ids.get(el);
    if (id === undefined) {
      id = next++;
      ids.set(el, id);
      byId.set(id, new WeakRef(el));
    }
    return id;
  }

  function hidden(el, style) {
    if (el.getAttribute("aria-hidden") === "true" || el.hidden) return true;
    if (style.display === "none" || style.visibility === "hidden" ||
        style.visibility === "collapse" || style.contentVisibility === "hidden") return true;
    return false;
  }

  function zeroArea(el) {
    const r = el.getBoundingClientRect();
    return r.width * r.height === 0;
  }

  function role(el) {
    const explicit = (el.getAttribute("role") || "").trim().split(/\s+/)[0];
    if (ROLES.has(explicit)) return explicit;
    const tag = el.tagName;
    if (tag === "A" && el.hasAttribute("href")) return "link";
    if (tag === "BUTTON" || tag === "SUMMARY") return "button";
    if (tag === "SELECT") return "combobox";
    if (tag === "TEXTAREA") return "textbox";
    if (tag === "INPUT") {
      const type = (el.type || "text").toLowerCase();
      if (type === "hidden") return "";
      if (type === "checkbox" || type === "radio") return type;
      if (["button", "submit", "reset", "image", "file"].includes(type)) return "button";
      return "textbox";
    }
    // Attributes first: isContentEditable and tabIndex compute style and focusability.
    if (el.hasAttribute("contenteditable") && el.isContentEditable &&
        !(el.parentElement && el.parentElement.isContentEditable)) {
      return "textbox";
    }
    if (el.hasAttribute("tabindex") && el.tabIndex >= 0 && !el.querySelector(INNER)) {
      return "button";
    }
    return "";
  }

  function pointer(el, style) {
    // What a user would click though nothing declares it: the element whose pointer cursor
    // starts here (its parent's is not a pointer), the usual sign of a click listener.
    if (style.cursor !== "pointer" || ["LABEL", "INPUT"].includes(el.tagName)) return false;
    // An item of a list is one of its own (a tree's nested items take the list's cursor).
    const up = el.tagName === "LI" ? null : el.parentElement;
    return (!up || getComputedStyle(up).cursor !== "pointer") && !el.querySelector(INNER) &&
      (listened.has(el) || !holdsTargets(el, false));
  }

  // Whether `el` holds elements the page listens to (or, `pointers`, where a pointer cursor
  // starts, and then more than 64 elements): they are the controls, `el` their container.
  function holdsTargets(el, pointers) {
    if (!listenedCount && !pointers) return false;
    const inside = el.getElementsByTagName("*");
    if (pointers && inside.length > 64) return true;
    const own = pointers && getComputedStyle(el).cursor === "pointer";
    for (const d of inside) {
      if (listened.has(d)) return true;
      if (pointers && !own && getComputedStyle(d).cursor === "pointer") return true;
    }
    return false;
  }

  // An element the page listens to clicks on (an icon drawn by CSS, a <span> of a menu): a
  // control if it is small and holds no control nor another listened element (those are).
  function bound(el) {
    if (!listened.has(el) || ["BODY", "HTML", "LABEL", "INPUT"].includes(el.tagName)) return false;
    if (el.querySelector(INNER) || (el.textContent || "").length > 2 * MAX_NAME) return false;
    return !holdsTargets(el, true);
  }

  // --- inline SVG: a shape named by what tells it apart (kind, size, colour, its text) ---------

  const SHAPES = { circle: "circle", ellipse: "ellipse", rect: "rectangle", line: "line",
    polyline: "line", path: "shape", image: "image", use: "icon" };
  const COLOURS = { black: [0, 0, 0], white: [255, 255, 255], gray: [128, 128, 128],
    red: [255, 0, 0], green: [0, 128, 0], lime: [0, 255, 0], blue: [0, 0, 255],
    yellow: [255, 255, 0], aqua: [0, 255, 255], magenta: [255, 0, 255], orange: [255, 165, 0],
    purple: [128, 0, 128], brown: [165, 42, 42], pink: [255, 192, 203], navy: [0, 0, 128] };
  const isSvg = (el) => el.namespaceURI === "http://www.w3.org/2000/svg";

  function svgKind(el) {
    const tag = el.tagName;
    if (tag === "polygon") {
      const n = el.points ? el.points.numberOfItems : 0;
      return n === 3 ? "triangle" : n === 4 ? "quadrilateral" : "polygon";
    }
    return SHAPES[tag] || "";
  }

  // The colour's name: the page's own word (fill="red"), else the nearest of COLOURS.
  function colourOf(el) {
    for (const prop of ["fill", "stroke"]) {
      const own = (el.getAttribute(prop) || "").trim().toLowerCase();
      if (/^[a-z]+$/.test(own) && !["none", "currentcolor", "transparent"].includes(own)) {
        return own;
      }
      const m = getComputedStyle(el)[prop].match(/^rgba?\((\d+), (\d+), (\d+)(, ([\d.]+))?\)$/);
      if (!m || (m[5] !== undefined && +m[5] === 0)) continue;
      let best = "", far = Infinity;
      for (const [word, [r, g, b]] of Object.entries(COLOURS)) {
        const d = (r - m[1]) ** 2 + (g - m[2]) ** 2 + (b - m[3]) ** 2;
        if (d < far) [best, far] = [word, d];
      }
      return best;
    }
    return "";
  }

  const shapeSize = (el) => {
    const r = el.getBoundingClientRect();
    return el.tagName === "text" ? r.height : Math.max(r.width, r.height);
  };

  // A figure's clickable shapes: their smallest and largest size (a size is said where they
  // are 1.5× apart: "small" and "large" are relative; a colour always).
  let figures = new Map();
  function figure(root) {
    let seen = figures.get(root);
    if (!seen) {
      const shapes = Array.from(root.querySelectorAll("*")).filter((s) =>
        (svgKind(s) || s.tagName === "text") &&
        (getComputedStyle(s).cursor === "pointer" || listened.has(s)));
      const all = shapes.map(shapeSize).filter((n) => n > 0);
      seen = { low: Math.min(...all), high: Math.max(...all) };
      figures.set(root, seen);
    }
    return seen;
  }

  // A shape's name: its text, else its kind (of its first shape for a group), then in
  // parentheses its size where it tells it apart and its colour: "q (small red)".
  function svgName(el) {
    const text = clip(el.textContent || "");
    const shape = svgKind(el) ? el : Array.from(el.querySelectorAll("*")).find(svgKind);
    const painted = text ? (el.tagName === "text" ? el : el.querySelector("text") || el) : shape;
    const name = labelsOf(el) || text || (shape ? svgKind(shape) : "figure");
    if (!painted || name === "shape") return name;  // a path: its colour tells nothing apart
    const { low, high } = figure(el.ownerSVGElement || el);
    const size = high >= 1.5 * low ? (shapeSize(painted) < Math.sqrt(low * high) ? "small" :
      "large") : "";
    const looks = [size, colourOf(painted)].filter(Boolean).join(" ");
    return looks ? `${name} (${looks})` : name;
  }

  // An icon drawn by CSS (an empty element of class "…icon…"): the words of its classes.
  // Framework words that name no action (jQuery UI, Bootstrap, Font Awesome...).
  const NOISE = new Set(["ui", "icon", "icons", "fa", "fas", "far", "glyphicon", "btn", "js",
    "button", "material", "bi", "corner", "all", "state", "default", "widget", "content",
    "helper", "clearfix", "active", "hover", "focus", "hitarea", "sm", "lg", "xs", "md"]);
  function classWords(el) {
    const words = [];
    for (const cls of el.classList) {
      for (const w of cls.toLowerCase().split(/[-_\s]+/)) {
        if (w && !NOISE.has(w) && !/^\d+$/.test(w) && !words.includes(w)) words.push(w);
      }
    }
    return clip(words.slice(0, 3).join(" "));
  }
  // Drawn where it means something: in a line of text (a menu item's, an instruction's), not
  // on a button that has its own words, nor alone (a resize handle).
  const isIcon = (el) => !el.firstElementChild && !(el.textContent || "").trim() &&
    /icon/i.test(el.getAttribute("class") || "") && !!el.parentElement &&
    Array.from(el.parentElement.childNodes).some((n) => n.nodeType === 3 && n.data.trim()) &&
    !el.closest("button, [role=button]");

  function labelsOf(el) {
    const by = el.getAttribute("aria-labelledby");
    if (by) {
      const text = by.split(/\s+/).map((i) => document.getElementById(i))
        .filter(Boolean).map((n) => n.textContent).join(" ");
      if (text.trim()) return clip(text);
    }
    const aria = el.getAttribute("aria-label");
    if (aria && aria.trim()) return clip(aria);
    if (el.labels && el.labels.length) {
      const text = Array.from(el.labels).map((l) => l.textContent).join(" ");
      if (text.trim()) return clip(text);
    }
    return "";
  }

  function nameOf(el) {
    if (isSvg(el)) return svgName(el);
    const box = el.tagName === "INPUT" && ["checkbox", "radio"].includes(el.type);
    return labelsOf(el) || clip(el.getAttribute("title") || "") ||
      clip(el.getAttribute("placeholder") || "") ||
      clip(el.textContent || (box ? "" : el.value) || "") ||
      clip((el.querySelector && el.querySelector("img[alt]") || {}).alt || "") ||
      (el.tagName === "INPUT" || el.hasAttribute("role") || el.hasAttribute("tabindex") ? "" :
        classWords(el));
  }

  function checked(el) {
    if (el.tagName === "INPUT") return el.checked;
    return el.getAttribute("aria-checked") === "true" || el.getAttribute("aria-pressed") === "true";
  }

  // The control's own markup: what sandbox/controls.py shows as its state.
  // Disabled, by the element or an ancestor (a disabled fieldset, an aria-disabled item).
  function disabled(el) {
    if (el.matches(":disabled")) return true;
    const off = el.closest("[aria-disabled]");
    return !!off && off.getAttribute("aria-disabled") === "true";
  }

  // What a control that opens something shows: ▸ closed, ▾ open (aria-expanded, or a submenu
  // it has, aria-haspopup, or a list of its own that is hidden: a folder of a tree).
  function expandable(el, r) {
    // A tab is selected, not opened (jQuery UI's tabs and accordions say aria-expanded).
    if (["textbox", "combobox", "searchbox", "tab"].includes(r)) return "";
    const open = el.getAttribute("aria-expanded");
    if (open === "true") return " ▾";
    if (open === "false" || ["true", "menu"].includes(el.getAttribute("aria-haspopup"))) return " ▸";
    for (const child of el.children) {
      if (["UL", "OL"].includes(child.tagName)) {
        return getComputedStyle(child).display === "none" ? " ▸" : " ▾";
      }
    }
    return "";
  }

  function controlInner(el, r, walkChildren) {
    const inner = controlMarkup(el, r, walkChildren);
    // A field says it is disabled among its fields (sandbox/controls.py); the rest after it.
    if (/^<(textarea|select|input type="(?!checkbox|radio))/.test(inner)) return inner;
    const state = (disabled(el) ? " (disabled)" : "") + expandable(el, r);
    // Inline, so that the state reads in the label (its first block is the label).
    return state ? inner.replace(/<(\/?)div>/g, "<$1span>") + state : inner;
  }

  function controlMarkup(el, r, walkChildren) {
    const tag = el.tagName;
    const name = labelsOf(el);
    const off = disabled(el) ? " disabled" : "";
    const type = (el.type || "text").toLowerCase();
    if (tag === "INPUT" && (type === "checkbox" || type === "radio")) {
      const box = `<input type="${type}"${el.checked ? " checked" : ""}>`;
      return name ? `${box} ${escText(name)}` : box;
    }
    if (tag === "INPUT" && !["button", "submit", "reset", "image", "file"].includes(type)) {
      // By its type, whatever its role (a jQuery UI spinner's is spinbutton).
      const shown = TEXT_INPUTS.has(type) ? type : "text";
      return `<input type="${shown}" name="${escAttr(name)}" placeholder="${escAttr(
        clip(el.getAttribute("placeholder") || ""))}" value="${escAttr(el.value || "")}"${off}>`;
    }
    if (tag === "INPUT") return escText(clip(el.value || el.alt || name || r));
    if (tag === "TEXTAREA") {
      return `<textarea name="${escAttr(name)}" placeholder="${escAttr(
        clip(el.getAttribute("placeholder") || ""))}"${off}>${escText(el.value || "")}</textarea>`;
    }
    if (tag === "SELECT") {
      const options = Array.from(el.options).map((o) =>
        `<option${o.selected ? " selected" : ""}>${escText(clip(o.label || o.text))}</option>`);
      return `<select name="${escAttr(name)}"${el.multiple ? " multiple" : ""}${off}>` +
        `${options.join("")}</select>`;
    }
    if (isSvg(el)) return escText(svgName(el));
    if (r === "checkbox" || r === "radio" || r === "switch") {
      const box = checked(el) ? "[x]" : "[ ]";
      return `${box} ${escText(nameOf(el))}`;
    }
    if (r === "textbox") {
      return `<input type="text" placeholder="${escAttr(name)}" value="${escAttr(
        clip(el.textContent || ""))}">`;
    }
    const inner = walkChildren();
    if (inner.replace(/<[^>]*>/g, "").trim()) return inner;
    return escText(nameOf(el) || r);
  }

  // Block elements a long page may fold away when they are far from the viewport.
  const FOLDABLE = new Set(["DIV", "SECTION", "ARTICLE", "ASIDE", "NAV", "MAIN", "HEADER",
    "FOOTER", "P", "UL", "OL", "DL", "TABLE", "PRE", "BLOCKQUOTE", "FIGURE", "DETAILS", "FORM",
    "FIELDSET"]);
  const HEADINGS = "h1, h2, h3, h4, h5, h6";

  // A block far from the viewport, folded: only its headings (each still reachable).
  function folded(el) {
    let out = "";
    for (const h of el.querySelectorAll(HEADINGS)) {
      if (hidden(h, getComputedStyle(h))) continue;
      const tag = h.tagName.toLowerCase();
      out += `<${tag}>${escText(clip(h.textContent)).replace(/[\\[\]]/g, "\\$&")}</${tag}>`;
    }
    return out;
  }

  // The page as marked HTML. With `budget` (characters of HTML), a page longer than that is
  // written again with the blocks far from the viewport (more than a viewport above it or two
  // below) folded to their headings, and a line saying so.
  function render(budget) {
    // A page of many more elements than the budget has characters' worth is read folded at
    // once: reading it whole first (to measure it) would cost what the folding saves.
    const many = budget && document.getElementsByTagName("*").length > budget / 4;
    const first = many ? null : renderOnce(false);
    if (first && (!budget || first.body.length <= budget)) return first;
    const again = renderOnce(true);
    again.body = "<p>(A long page: what is far from the viewport shows only its headings; " +
      "scroll, or find --text, to read it.)</p>" + again.body;
    again.folded = true;
    return again;
  }

  function renderOnce(fold) {
    const live = new Set();
    figures = new Map();
    let depth = 0;
    const far = (el) => {
      const r = el.getBoundingClientRect();
      return r.bottom < -innerHeight || r.top > 2 * innerHeight;
    };

    function control(el, r, childrenOf) {
      const id = idOf(el);
      live.add(id);
      const value = JSON.stringify({ doc, role: r, name: nameOf(el) });
      const inner = controlInner(el, r, childrenOf);
      return `<span entity="control:page[${id}]" data-value="${escAttr(value)}">${inner}</span>`;
    }

    function children(el, inControl, skip = []) {
      let out = "";
      const kids = el.shadowRoot ? [...el.shadowRoot.childNodes, ...el.childNodes] : el.childNodes;
      for (const child of kids) if (!skip.includes(child)) out += node(child, inControl);
      return out;
    }

    function node(n, inControl) {
      // Outside a control's label (where the renderer escapes it), page text that spells a
      // link, "[Pay](control:page[3])", must not read as one: brackets and backslashes are
      // escaped as Markdown text.
      if (n.nodeType === Node.TEXT_NODE) {
        return inControl ? escText(n.data) : escText(n.data).replace(/[\\[\]]/g, "\\$&");
      }
      if (n.nodeType !== Node.ELEMENT_NODE) return "";
      const el = n;
      const tag = el.tagName;
      if (SKIP.has(tag) || depth > MAX_DEPTH) return "";
      const style = getComputedStyle(el);
      if (hidden(el, style)) return "";
      if (style.display === "contents") return children(el, inControl);
      // Measured only where it decides (a box costs a layout query): a control, an image, a
      // box that clips what overflows it. An empty box renders nothing anyway.
      const area = () => !zeroArea(el);
      if (fold && depth > 0 && FOLDABLE.has(tag) && far(el)) return folded(el);
      if (style.overflow !== "visible" && !area()) return "";
      let r = inControl ? "" : role(el);
      if (tag === "LABEL" && el.control && !inControl) {
        // A label whose control shows names it there; a label of a hidden control (a styled
        // checkbox) is what a user clicks, and shows the control's state.
        const target = el.control;
        const ts = getComputedStyle(target);
        const shown = !hidden(target, ts) && !zeroArea(target);
        // Its text is the control's name: the control stands for both.
        if (shown && el.contains(target)) return node(target, false);
        if (shown || !area()) return "";
        const id = idOf(el);
        live.add(id);
        const state = ["checkbox", "radio"].includes(target.type) ?
          (target.checked ? "[x] " : "[ ] ") : "";
        const value = JSON.stringify({ doc, role: "label", name: clip(el.textContent) });
        return `<span entity="control:page[${id}]" data-value="${escAttr(value)}">${state}` +
          `${escText(clip(el.textContent))}</span>`;
      }
      if (!r && !inControl && (pointer(el, style) || bound(el)) && area()) r = "button";
      depth++;
      try {
        if (r) {
          if (!area()) return "";
          // An item's own list (a folder's files) is no part of its label: items of their own.
          const lists = tag === "LI" ? Array.from(el.children).filter((c) =>
            ["UL", "OL"].includes(c.tagName)) : [];
          const own = control(el, r, () => children(el, true, lists));
          if (!lists.length) return own;
          return `<li>${own}${lists.map((l) => node(l, false)).join("")}</li>`;
        }
        if (tag === "IMG") {
          const alt = clip(el.getAttribute("alt") || "");
          return alt && area() ? `<img alt="${escAttr(alt)}">` : "";
        }
        if (isIcon(el) && area()) {
          const words = el.getAttribute("aria-label") || el.getAttribute("title") || classWords(el);
          return words ? `<img alt="${escAttr(clip(words))}">` : "";
        }
        if (tag === "DIALOG" || ["dialog", "alertdialog"].includes(el.getAttribute("role"))) {
          const name = labelsOf(el);
          return `<div><p>Dialog${name ? ": " + escText(name) : ""}</p>${children(el, inControl)}</div>`;
        }
        const inner = children(el, inControl);
        if (KEEP.has(tag)) {
          const lower = tag.toLowerCase();
          if (tag === "BR" || tag === "HR") return `<${lower}>`;
          return `<${lower}>${inner}</${lower}>`;
        }
        if (tag === "A") return inner;
        if (tag === "text") return ` <span>${inner}</span> `;  // an SVG figure's words apart
        if (isSvg(el)) return `<span>${inner}</span>`;
        if (style.display.startsWith("inline")) return `<span>${inner}</span>`;
        // A label reads with the control beside it, however the page lays it out.
        return tag === "LABEL" ? ` <span>${inner}</span> ` : `<div>${inner}</div>`;
      } finally {
        depth--;
      }
    }

    const body = document.body ? node(document.body, false) : "";
    if (byId.size > 2 * live.size + 256) {
      for (const [id, ref] of byId) if (!live.has(id) && !ref.deref()) byId.delete(id);
    }
    const title = clip((document.title || "").replace(/["<>]/g, "")) || "Page";
    return { title, body, url: location.href };
  }

  // Scroll the first shown text containing `text` (any case) to the viewport's centre.
  function reveal(text) {
    const wanted = text.toLowerCase();
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const el = n.parentElement;
      if (el && n.data.toLowerCase().includes(wanted) && !hidden(el, getComputedStyle(el))) {
        el.scrollIntoView({ block: "center" });
        return true;
      }
    }
    return false;
  }

  // The element behind an id, if it is still in the document and shown; else null.
  function element(id, seenDoc) {
    if (seenDoc !== undefined && seenDoc !== doc) return null;
    const ref = byId.get(id);
    const el = ref && ref.deref();
    if (!el || !el.isConnected) return null;
    for (let up = el; up; up = up.parentElement) {
      if (hidden(up, getComputedStyle(up))) return null;
    }
    return el;
  }

  // Scroll the element into view and say where a click lands on it: its centre, or where the
  // element is hit nearest to it (a slice of a pie, a ring: the centre of the box is not on it).
  function point(el) {
    el.scrollIntoView({ block: "center", inline: "center", behavior: "instant" });
    const r = el.getBoundingClientRect();
    if (r.width * r.height === 0) return null;
    const reaches = (x, y) => {
      const hit = document.elementFromPoint(x, y);
      return !!hit && (hit === el || el.contains(hit) || (hit.control === el) ||
        (el.labels && Array.from(el.labels).some((l) => l === hit || l.contains(hit))));
    };
    const x = r.left + r.width / 2;
    const y = r.top + r.height / 2;
    if (reaches(x, y)) return { x, y, reaches: true };
    const tries = [];
    for (let i = 1; i < 10; i++) {
      for (let j = 1; j < 10; j++) tries.push([r.left + r.width * i / 10, r.top + r.height * j / 10]);
    }
    tries.sort((a, b) => Math.hypot(a[0] - x, a[1] - y) - Math.hypot(b[0] - x, b[1] - y));
    const found = tries.find(([tx, ty]) => reaches(tx, ty));
    return found ? { x: found[0], y: found[1], reaches: true } : { x, y, reaches: false };
  }

  // Marks elements the page listens to clicks on (see bound()).
  function listen(...els) {
    for (const el of els) {
      if (el && el.nodeType === 1 && !listened.has(el)) {
        listened.add(el);
        listenedCount++;
      }
    }
  }

  // Resolves once the DOM has not changed for two animation frames and a quiet window.
  // Resolves true once no DOM change happened for two task turns and `quietMs`, false when
  // `timeoutMs` passes first. Task turns, not animation frames: a page that is not drawn gets
  // frames late, and a frame costs 16 ms where a turn costs a few microseconds.
  function settle(quietMs, timeoutMs) {
    return new Promise((resolve) => {
      const start = performance.now();
      let last = start;
      let quiet = 0;
      const observer = new MutationObserver(() => { last = performance.now(); quiet = 0; });
      observer.observe(document, { subtree: true, childList: true, attributes: true,
        characterData: true });
      const channel = new MessageChannel();
      const done = (ok) => { observer.disconnect(); channel.port1.close(); resolve(ok); };
      const tick = () => {
        const now = performance.now();
        quiet++;
        if (quiet >= 2 && now - last >= quietMs) done(true);
        else if (now - start >= timeoutMs) done(false);
        else if (quiet >= 2) setTimeout(tick, Math.max(1, quietMs - (now - last)));
        else channel.port2.postMessage(0);
      };
      channel.port1.onmessage = tick;
      tick();
    });
  }

  // Select `wanted` (a label or value) in a select; in a multiple one, `wanted` may list
  // several, comma-separated, and exactly those are selected.
  function choose(el, wanted) {
    if (el.tagName !== "SELECT") return null;
    const options = Array.from(el.options);
    const find = (text) => {
      const want = text.trim().toLowerCase();
      return options.find((o) => o.value.toLowerCase() === want) ||
        options.find((o) => clip(o.label || o.text).toLowerCase() === want);
    };
    const whole = find(String(wanted));
    const parts = whole || !el.multiple ? [String(wanted)] : String(wanted).split(",");
    const found = parts.map((part) => [part.trim(), find(part)]);
    const missing = found.filter(([, o]) => !o).map(([part]) => part);
    if (missing.length) {
      return { missing, options: options.map((o) => clip(o.label || o.text)) };
    }
    const chosen = new Set(found.map(([, o]) => o));
    if (el.multiple) for (const o of options) o.selected = chosen.has(o);
    else el.value = found[0][1].value;
    el.dispatchEvent(new Event("input", { bubbles: true }));
    el.dispatchEvent(new Event("change", { bubbles: true }));
    return { chosen: [...chosen].map((o) => clip(o.label || o.text)) };
  }

  function clear(el) {
    el.focus();
    if ("select" in el && typeof el.select === "function" && "value" in el) {
      el.select();
    } else {
      const range = document.createRange();
      range.selectNodeContents(el);
      const sel = getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
    }
  }

  // --- seed 004: pages marked with data-assist-* --------------------------------------------

  // Every element matching `selector`, shadow roots included (portals are ordinary nodes).
  function deepAll(selector, root = document, found = []) {
    for (const el of root.querySelectorAll(selector)) found.push(el);
    for (const host of root.querySelectorAll("*")) {
      if (host.shadowRoot) deepAll(selector, host.shadowRoot, found);
    }
    return found;
  }

  // Shown by the blueprint's rule: not hidden, display:none, aria-hidden or of zero area.
  function visible(el) {
    for (let at = el; at; at = at.parentElement || (at.getRootNode() || {}).host) {
      if (at.nodeType !== 1) break;
      if (at.hidden || at.getAttribute("aria-hidden") === "true") return false;
    }
    if (!el.isConnected || !el.checkVisibility({ visibilityProperty: true })) return false;
    const r = el.getBoundingClientRect();
    return r.width * r.height > 0;
  }

  function zIndex(el) {
    for (let at = el; at && at.nodeType === 1; at = at.parentElement) {
      const z = parseInt(getComputedStyle(at).zIndex, 10);
      if (!Number.isNaN(z)) return z;
    }
    return 0;
  }

  // The topmost (z-index, then the later in document order) of `els`.
  function topmost(els) {
    let best = null;
    for (const el of els) if (!best || zIndex(el) >= zIndex(best)) best = el;
    return best;
  }

  function deepActive() {
    let el = document.activeElement;
    while (el && el.shadowRoot && el.shadowRoot.activeElement) el = el.shadowRoot.activeElement;
    return el && el !== document.body ? el : null;
  }

  function fieldName(el) {
    return el.getAttribute("data-assist-field") || el.getAttribute("name") || el.id || role(el);
  }

  function assist() {
    const shown = (kind) => deepAll(`[data-assist-${kind}]`).filter(visible);
    const id = (el, kind) => el.getAttribute(`data-assist-${kind}`);
    const modals = shown("modal").filter((el) => el.getAttribute("aria-modal") === "true");
    const modal = topmost(modals);
    const routes = shown("route");
    if (!deepAll("[data-assist-route],[data-assist-view],[data-assist-modal],[data-assist-panel]," +
      "[data-assist-field]").length) return null;
    const route = topmost(routes);
    const scope = modal || null;
    const active = deepActive();
    const focus = active && (!scope || scope.contains(active)) ? fieldName(active) : null;
    return {
      route: route ? id(route, "route") : null,
      title: route ? route.getAttribute("data-assist-title") : null,
      views: shown("view").sort((a, b) => zIndex(b) - zIndex(a)).map((el) => id(el, "view")),
      panels: shown("panel").map((el) => id(el, "panel")),
      modal: modal ? id(modal, "modal") : null,
      focus,
    };
  }

  function capabilities() {
    const all = (kind) => [...new Set(deepAll(`[data-assist-${kind}]`)
      .map((el) => el.getAttribute(`data-assist-${kind}`)))];
    return { routes: all("route"), views: all("view"), panels: all("panel"),
      modals: all("modal"), fields: all("field") };
  }

  // The visible element of field `name`, in the active modal when one is open: its id and doc.
  function field(name) {
    const state = assist();
    const modal = state && state.modal ? deepAll(`[data-assist-modal="${CSS.escape(state.modal)}"]`)
      .find(visible) : null;
    const found = deepAll(`[data-assist-field="${CSS.escape(name)}"]`).filter(visible)
      .filter((el) => !modal || modal.contains(el) || modal === el.getRootNode().host);
    return found.length ? { id: idOf(found[0]), doc } : null;
  }

  function modalShown(name) {
    return deepAll(`[data-assist-modal="${CSS.escape(name)}"]`).some(visible);
  }

  // --- seed 002: the viewport as a terminal browser shows it ----------------------------------

  const WIDE = /[\u1100-\u115F\u2E80-\u303E\u3041-\u33FF\u3400-\u4DBF\u4E00-\u9FFF\uA000-\uA4CF\uAC00-\uD7A3\uF900-\uFAFF\uFE30-\uFE4F\uFF00-\uFF60\uFFE0-\uFFE6\u{1F300}-\u{1F64F}\u{1F900}-\u{1F9FF}\u{20000}-\u{3FFFD}]/u;
  const segmenter = new Intl.Segmenter(undefined, { granularity: "grapheme" });

  // The laid-out viewport as `rows` lines of `cols` cells: each visible word written at the
  // cell its box starts in (a wide character takes two cells, a combining one none), a form
  // control as [its value or placeholder]. The cursor is the focused element's cell.
  function textGrid(cols, rows) {
    const cellW = innerWidth / cols, cellH = innerHeight / rows;
    const grid = Array.from({ length: rows }, () => Array(cols).fill(" "));
    // Where each row's text ends so far: a word laid out over it (a font narrower than the
    // cells, wide characters drawn narrow) moves right, after a space, instead of hiding it.
    const ends = Array(rows).fill(0);
    const put = (x, y, text) => {
      let col = Math.floor(x / cellW);
      const row = Math.floor(y / cellH);
      if (row < 0 || row >= rows) return;
      if (col < ends[row]) col = ends[row] + 1;
      for (const { segment } of segmenter.segment(text)) {
        const wide = WIDE.test(segment) ? 2 : 1;
        if (col >= 0 && col + wide <= cols) {
          grid[row][col] = segment;
          if (wide === 2) grid[row][col + 1] = "";
        }
        col += wide;
      }
      ends[row] = Math.max(ends[row], col);
    };
    const range = document.createRange();
    const words = (node) => {
      for (const match of node.data.matchAll(/\S+/g)) {
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const rect = range.getClientRects()[0];
        if (rect && rect.bottom > 0 && rect.top < innerHeight) put(rect.left, rect.top, match[0]);
      }
    };
    const control = (el) => {
      const r = el.getBoundingClientRect();
      const shown = el.tagName === "SELECT"
        ? (el.selectedOptions[0] || {}).textContent || ""
        : el.type === "checkbox" || el.type === "radio"
          ? (el.checked ? "x" : " ")
          : el.value || el.placeholder || "";
      if (r.width * r.height > 0 && el.type !== "hidden") put(r.left, r.top, `[${shown}]`);
    };
    // A box wholly above or below the viewport holds nothing to show (but for what is
    // positioned out of it, which a terminal browser leaves out too): not walked.
    const offscreen = (el) => {
      const r = el.getBoundingClientRect();
      return r.height > 0 && (r.bottom < 0 || r.top > innerHeight);
    };
    const visit = (parent, depth) => {
      if (depth > MAX_DEPTH) return;
      for (const child of parent.childNodes) {
        if (child.nodeType === 3) {
          if (child.data.trim()) words(child);
        } else if (child.nodeType === 1 && !SKIP.has(child.tagName) && !offscreen(child) &&
                   !hidden(child, getComputedStyle(child))) {
          if (["INPUT", "TEXTAREA", "SELECT"].includes(child.tagName)) control(child);
          else {
            visit(child, depth + 1);
            if (child.shadowRoot) visit(child.shadowRoot, depth + 1);
          }
        }
      }
    };
    visit(document.body || document.documentElement, 0);
    const lines = grid.map((cells) => cells.join("").replace(/\s+$/, ""));
    const active = deepActive();
    let cursor = null;
    if (active) {
      const r = active.getBoundingClientRect();
      cursor = { x: Math.max(0, Math.floor(r.left / cellW)), y: Math.max(0, Math.floor(r.top / cellH)) };
    }
    return { lines, cursor };
  }

  // Scroll an element's own content (a textarea, a list that scrolls) by `direction`; false
  // when neither it nor an ancestor scrolls.
  function scrollIn(el, direction) {
    let box = el;
    while (box && box !== document.body && box.scrollHeight <= box.clientHeight) {
      box = box.parentElement;
    }
    if (!box || box === document.body) return false;
    const step = { down: box.clientHeight * 0.8, up: -box.clientHeight * 0.8,
      top: -box.scrollHeight, bottom: box.scrollHeight }[direction];
    box.scrollBy(0, step);
    box.dispatchEvent(new Event("scroll"));
    return true;
  }

  globalThis.__aotuiGeneric = { doc, render, element, point, settle, choose, clear, checked,
    listen, scrollIn,
    role, nameOf, assist, capabilities, field, modalShown, textGrid, reveal };
})();
