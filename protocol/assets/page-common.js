// What the proxy's page and the server's page share (protocol/src/page.rs
// puts it in both): DOM helpers that put text in with textContent only,
// byte sizes, and the loop that renders the status the page came with and
// then GET /status.json every few seconds.
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function num(n) { return el("td", n, "n"); }
function text(id, value, cls) {
  const e = document.getElementById(id);
  e.textContent = value;
  if (cls !== undefined) e.className = cls;
}
function bytes(n) {
  if (n < 1024) return n + " B";
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n, u = -1;
  do { v /= 1024; u++; } while (v >= 1024 && u < units.length - 1);
  return v.toFixed(v < 10 ? 2 : 1) + " " + units[u];
}
function live(render, everyMs) {
  async function refresh() {
    try {
      const r = await fetch("/status.json", { cache: "no-store" });
      if (!r.ok) throw new Error("HTTP " + r.status);
      render(await r.json());
    } catch (e) {
      text("live", "not updated: " + e.message, "bad");
    }
  }
  render(JSON.parse(document.getElementById("initial").textContent));
  setInterval(refresh, everyMs);
}
