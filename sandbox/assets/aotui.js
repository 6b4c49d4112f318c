// aotui.js: the small helper every web app may load from its own origin,
//   <script src="/.aotui/aotui.js"></script>
// It is optional: a page may listen for the `aotui:operation` event itself (docs/web-apps.md).
//
//   aotui.operation("add", async ({ title }) => { ...; return result; });
//       runs when the agent calls operation "add" on any view (or only on view `key`, with
//       { view: key } as a third argument); the value returned (or awaited) is the operation's
//       result; a thrown error is its failure (E_APP_ERROR, with the error's message).
//   aotui.serialize = () => data;        what the page keeps across restarts (JSON-able)
//   aotui.restore = (data) => { ... };   rebuilds the page from it after a restart
(() => {
  "use strict";
  if (window.aotui) return;
  const keyOf = (el) => {
    const root = el && el.closest ? el.closest("[view]") : null;
    return root ? root.getAttribute("key") || root.getAttribute("view") : null;
  };
  window.aotui = {
    serialize: null,
    restore: null,
    operation(name, handler, options = {}) {
      document.addEventListener("aotui:operation", (event) => {
        const detail = event.detail;
        if (!detail || detail.operation !== name) return;
        if (options.view !== undefined && keyOf(event.target) !== options.view) return;
        detail.waitUntil(Promise.resolve().then(() => handler(detail.args || {}, detail)));
      });
    },
  };
})();
