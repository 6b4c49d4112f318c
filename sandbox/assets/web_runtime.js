// The web app runtime's side in the page (sandbox/webapp.py says how it is used).
// Evaluated at the start of every document of a web app, in an isolated world: the page's own
// scripts share its DOM but never see this object, so a page cannot stop the runtime from
// reading it or forge its change signal. It reads a view root as the HTML the one renderer
// (sandbox/render.py) takes, counts DOM changes and tells the worker of them through a binding,
// and decides when the page has settled.
(() => {
  "use strict";
  if (globalThis.__aotuiWeb) return;
  // A document's token: a change count of another document never compares equal to this one's.
  const doc = Math.random().toString(36).slice(2, 10);
  let seq = 0;
  let pending = false;
  let lastSent = 0;
  // The worker hears of changes at most this often (it renders and sends at most 10 a second).
  const NOTIFY_MS = 50;
  const MAX_DEPTH = 200;
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "HEAD", "META", "LINK",
    "IFRAME", "OBJECT", "EMBED", "CANVAS"]);
  const ALWAYS_SHOWN = new Set(["OPTION", "OPTGROUP"]);
  const VOID = new Set(["AREA", "BASE", "BR", "COL", "EMBED", "HR", "IMG", "INPUT", "LINK",
    "META", "SOURCE", "TRACK", "WBR"]);
  const escText = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const escAttr = (s) => escText(s).replace(/"/g, "&quot;");

  function notify() {
    if (pending) return;
    pending = true;
    const wait = Math.max(0, lastSent + NOTIFY_MS - performance.now());
    setTimeout(() => {
      pending = false;
      lastSent = performance.now();
      const binding = globalThis.__aotuiSignal;
      if (typeof binding === "function") binding(state());
    }, wait);
  }

  function changed() {
    seq++;
    notify();
  }

  function state() {
    return doc + ":" + seq;
  }

  function observe() {
    new MutationObserver(changed).observe(document, { subtree: true, childList: true,
      attributes: true, characterData: true });
    // A typed value or a ticked box changes a property, not the DOM: the view shows it.
    for (const type of ["input", "change"]) document.addEventListener(type, changed, true);
  }
  observe();

  function keyOf(el) {
    return el.getAttribute("key") || el.getAttribute("view");
  }

  function root(key) {
    for (const el of document.querySelectorAll("[view]")) {
      if (keyOf(el) === key) return el;
    }
    return null;
  }

  // The keys of the page's top-level view roots, in document order.
  function roots() {
    const found = [];
    for (const el of document.querySelectorAll("[view]")) {
      if (!el.parentElement || !el.parentElement.closest("[view]")) found.push(keyOf(el));
    }
    return found;
  }

  function shown(el) {
    if (ALWAYS_SHOWN.has(el.tagName)) return true;
    if (el.hidden || el.getAttribute("aria-hidden") === "true") return false;
    if (el.checkVisibility({ visibilityProperty: true })) return true;
    // display: contents has no box of its own, yet its children show.
    return getComputedStyle(el).display === "contents";
  }

  function attributes(el) {
    let out = "";
    const tag = el.tagName;
    const reflect = tag === "INPUT" || tag === "OPTION";
    for (const attr of el.attributes) {
      const name = attr.name;
      if (reflect && (name === "value" || name === "checked" || name === "selected")) continue;
      out += " " + name + (attr.value === "" ? "" : '="' + escAttr(attr.value) + '"');
    }
    if (tag === "INPUT") {
      const type = (el.getAttribute("type") || "text").toLowerCase();
      if (type === "checkbox" || type === "radio") {
        if (el.hasAttribute("value")) out += ' value="' + escAttr(el.value) + '"';
        if (el.checked) out += " checked";
      } else if (el.value !== "" || el.hasAttribute("value")) {
        out += ' value="' + escAttr(el.value) + '"';
      }
    } else if (tag === "OPTION") {
      if (el.hasAttribute("value")) out += ' value="' + escAttr(el.value) + '"';
      if (el.selected) out += " selected";
    }
    return out;
  }

  // The element as HTML, with current values of form controls written as attributes and what
  // is not shown (hidden, display: none, scripts, styles) left out.
  function write(el, depth) {
    if (SKIP.has(el.tagName) || depth > MAX_DEPTH) return "";
    if (depth > 0 && !shown(el)) return "";
    const tag = el.localName;
    let out = "<" + tag + attributes(el) + ">";
    if (VOID.has(el.tagName)) return out;
    if (el.tagName === "TEXTAREA") {
      out += escText(el.value);
    } else {
      for (const child of el.childNodes) {
        if (child.nodeType === Node.TEXT_NODE) out += escText(child.data);
        else if (child.nodeType === Node.ELEMENT_NODE) out += write(child, depth + 1);
      }
    }
    return out + "</" + tag + ">";
  }

  function html(key) {
    const el = root(key);
    return el === null ? null : write(el, 0);
  }

  // Resolves once no DOM change happened for `turns` task turns in a row and at least
  // `quietMs` passed since the last one, with true; with false when `timeoutMs` passes first.
  function settle(turns, quietMs, timeoutMs) {
    return new Promise((resolve) => {
      const start = performance.now();
      let seen = seq;
      let quiet = 0;
      let since = start;
      const channel = new MessageChannel();
      const tick = () => {
        const now = performance.now();
        if (seq !== seen) {
          seen = seq;
          quiet = 0;
          since = now;
        } else {
          quiet++;
        }
        if (quiet >= turns && now - since >= quietMs) {
          channel.port1.close();
          resolve(true);
        } else if (now - start >= timeoutMs) {
          channel.port1.close();
          resolve(false);
        } else if (quietMs > 0 && quiet >= turns) {
          setTimeout(tick, Math.max(1, quietMs - (now - since)));
        } else {
          channel.port2.postMessage(0); // a task turn, without setTimeout's 4 ms clamp
        }
      };
      channel.port1.onmessage = tick;
      tick();
    });
  }

  globalThis.__aotuiWeb = { html, roots, settle, state, root };
})();
