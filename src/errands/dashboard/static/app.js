// errands dashboard: live counters (polling every 2 s, paused while the tab is hidden), live lists
// (jobs, dead letter, workers: every 5 s, pausable), the theme switch, and the users page's live
// filter.  Everything also works without JavaScript.
(function () {
  "use strict";
  const body = document.body;
  const root = body.dataset.root || "";

  document.querySelectorAll("[data-autosubmit]").forEach(function (el) {
    el.addEventListener("change", function () { el.form.submit(); });
  });

  // The "More" menu opens without JavaScript (a <details>); with it, Escape or a click elsewhere closes it.
  document.querySelectorAll("nav .more").forEach(function (menu) {
    menu.addEventListener("keydown", function (e) {
      if (e.key === "Escape" && menu.open) { menu.open = false; menu.querySelector("summary").focus(); }
    });
    document.addEventListener("click", function (e) {
      if (menu.open && !menu.contains(e.target)) { menu.open = false; }
    });
  });

  document.querySelectorAll("[data-live-filter]").forEach(function (input) {
    const table = document.querySelector(input.dataset.liveFilter);
    if (!table) { return; }
    input.addEventListener("input", function () {
      const needle = input.value.trim().toLowerCase();
      table.querySelectorAll("tbody tr[data-filter-text]").forEach(function (row) {
        row.hidden = needle !== "" && row.dataset.filterText.indexOf(needle) === -1;
      });
    });
  });

  // Live lists (jobs, dead letter, workers): every few seconds the page's own URL (so its filter and
  // page) is fetched again and its [data-refresh-region] swapped in, unless the operator is busy
  // there: focus inside it, a ticked box, text selected in it, or a half-typed form anywhere.
  (function liveRegions() {
    const toggle = document.querySelector("[data-live-refresh]");
    const regions = document.querySelectorAll("[data-refresh-region]");
    if (!toggle || !regions.length) { return; }
    const every = Number(toggle.dataset.liveRefresh) || 5000;
    const key = "errands-live-" + window.location.pathname;
    if (window.sessionStorage && sessionStorage.getItem(key) === "off") { toggle.checked = false; }
    let timer = null;
    let typed = false;
    document.addEventListener("input", function (e) {
      if (e.target.closest && !e.target.closest("[data-refresh-region]") && e.target !== toggle) { typed = true; }
    });
    document.addEventListener("submit", function () { typed = false; });

    function busy(region) {
      const active = document.activeElement;
      if (active && active !== document.body && region.contains(active)) { return true; }
      if (region.querySelector("input[type=checkbox]:checked, details[open]")) { return true; }
      const sel = window.getSelection ? window.getSelection() : null;
      return !!(sel && !sel.isCollapsed && sel.anchorNode && region.contains(sel.anchorNode));
    }

    function swap(html) {
      const fresh = new DOMParser().parseFromString(html, "text/html");
      const x = window.scrollX, y = window.scrollY;
      regions.forEach(function (region) {
        const name = region.dataset.refreshRegion;
        const next = fresh.querySelector("[data-refresh-region='" + CSS.escape(name) + "']");
        if (!next || busy(region) || region.innerHTML === next.innerHTML) { return; }
        region.innerHTML = next.innerHTML;
      });
      window.scrollTo(x, y);
      document.body.dataset.refreshedAt = String(Date.now());
    }

    function tick() {
      if (typed || document.visibilityState !== "visible") { return; }
      // X-Errands-Live: a refresh, which may get the list everyone shares while its next read loads.
      fetch(window.location.href, { credentials: "same-origin",
                                    headers: { "Accept": "text/html", "X-Errands-Live": "1" } })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(swap)
        .catch(function () { /* a missed refresh is retried at the next tick */ });
    }

    function schedule() {
      if (timer) { clearInterval(timer); timer = null; }
      if (toggle.checked && document.visibilityState === "visible") { timer = setInterval(tick, every); }
    }
    toggle.addEventListener("change", function () {
      if (window.sessionStorage) { sessionStorage.setItem(key, toggle.checked ? "on" : "off"); }
      schedule();
    });
    document.addEventListener("visibilitychange", schedule);
    schedule();
  })();

  const live = document.querySelector("[data-live='overview']");
  if (!live) { return; }
  const auto = document.getElementById("auto-refresh");
  const announcer = document.getElementById("live");
  const banner = document.getElementById("no-worker");
  let timer = null;

  function set(name, value, suffix) {
    document.querySelectorAll("[data-total='" + name + "']").forEach(function (el) {
      const text = Number(value).toLocaleString("en-US") + (suffix || "");
      if (el.textContent !== text) { el.textContent = text; }
    });
  }

  // The chart is SVG drawn on the server (axes, a <title> per bucket for hover): when the totals
  // move, the same chart is fetched again as a fragment and swapped in.
  let chartTotals = null;
  function drawChart(t, windowName) {
    const chart = document.querySelector("[data-chart]");
    if (!chart) { return; }
    const totals = t.total_succeeded + "/" + t.total_failed;
    if (chartTotals === null) { chartTotals = chart.dataset.totals || ""; }
    if (totals === chartTotals) { return; }
    chartTotals = totals;
    fetch(root + "/charts/throughput?window=" + encodeURIComponent(windowName),
          { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { chart.innerHTML = html; })
      .catch(function () { chartTotals = ""; });
  }

  function refresh() {
    const params = new URLSearchParams(window.location.search);
    // X-Errands-Live: the page's own refresh, answered from the model every open overview shares
    // (the previous one while the next loads).
    fetch(root + "/api/overview?window=" + encodeURIComponent(params.get("window") || "1h"),
          { credentials: "same-origin", headers: { "Accept": "application/json", "X-Errands-Live": "1" } })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (data) {
        Object.keys(data.totals).forEach(function (k) {
          set(k, data.totals[k], data.totals_capped && data.totals_capped[k] ? "+" : "");
        });
        set("succeeded_window", data.throughput.total_succeeded);
        set("failed_window", data.throughput.total_failed);
        drawChart(data.throughput, params.get("window") || "1h");
        set("workers_alive", data.workers_alive);
        document.querySelectorAll(".counter.state-stale").forEach(function (el) {
          el.classList.toggle("warn", data.totals.stale > 0);
        });
        data.queues.forEach(function (q) {
          document.querySelectorAll("[data-queue='" + CSS.escape(q.name) + "'][data-state]").forEach(function (cell) {
            const s = cell.dataset.state;
            const text = Number(q[s]).toLocaleString("en-US") + (q.capped && q.capped[s] ? "+" : "");
            if (cell.textContent !== text) { cell.textContent = text; }
          });
        });
        if (banner) { banner.hidden = !data.no_worker; }
        if (announcer) {
          announcer.textContent = data.totals.ready + " ready, " + data.totals.running + " running, " +
            data.totals.failed + " failed";
        }
      })
      .catch(function () { /* a missed refresh is retried at the next tick */ });
  }

  function schedule() {
    if (timer) { clearInterval(timer); timer = null; }
    if (auto && auto.checked && document.visibilityState === "visible") { timer = setInterval(refresh, 2000); }
  }
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible" && auto && auto.checked) { refresh(); }
    schedule();
  });
  if (auto) { auto.addEventListener("change", schedule); }
  schedule();
})();
