// Live regions (elements that poll with hx-trigger="every ..."), and the runs table's ticks.
//
// - A live region whose refreshes fail says so: "stale — last update 30 s ago", in its
//   [data-live-state] element (one is added at its top when it has none).
// - The runs table stops refreshing while rows are ticked, and says "paused": a refresh would
//   replace the table and untick them. A refresh already on its way when a row is ticked is
//   not swapped in either.
// - A refresh not answered within REFRESH_TIMEOUT_MS is given up (htmx's request timeout) and
//   counts as failed: htmx sends a region's next refresh only once the one before has ended, so a
//   single request lost on the way (a proxy or server that never answers) froze the region for
//   good, still saying "Live".
// - The select-all checkbox (hidden until this script runs: without it, it could do nothing)
//   ticks or unticks every row of the page.
(function () {
  "use strict";

  // Longer than a page read may take (the server stops each of its statements at web/guards.py's
  // PAGE_LIMIT_MS, 4.5 s).
  var REFRESH_TIMEOUT_MS = 10000;
  var lastUpdate = {};  // region id -> Date.now() of its last successful refresh

  function isLive(elt) {
    return elt && elt.id && /\bevery\s/.test(elt.getAttribute("hx-trigger") || "");
  }

  function ticked(region) {
    return region.querySelector("input[name=ids]:checked") !== null;
  }

  function stateElement(region) {
    var state = region.querySelector("[data-live-state]");
    if (!state) {
      state = document.createElement("p");
      state.setAttribute("data-live-state", "");
      state.setAttribute("role", "status");
      state.className = "live-state";
      region.insertBefore(state, region.firstChild);
    }
    if (!state.hasAttribute("data-live-words")) {
      state.setAttribute("data-live-words", state.textContent);
    }
    return state;
  }

  function ago(ms) {
    return window.jobswebWords(Math.max(0, ms) / 1000);  // static/local-times.js: every page's words
  }

  function show(region, mode) {
    var state = stateElement(region);
    region.classList.toggle("is-stale", mode === "stale");
    region.classList.toggle("is-paused", mode === "paused");
    if (mode === "stale") {
      state.textContent = "stale — last update " + ago(Date.now() - (lastUpdate[region.id] || Date.now()));
    } else if (mode === "paused") {
      state.textContent = "paused while rows are ticked";
    } else {
      state.textContent = state.getAttribute("data-live-words");
    }
  }

  function stamp(root) {
    var regions = root.querySelectorAll ? root.querySelectorAll("[hx-trigger]") : [];
    var all = Array.prototype.slice.call(regions);
    if (isLive(root)) all.push(root);
    all.forEach(function (region) {
      if (isLive(region)) lastUpdate[region.id] = Date.now();
    });
    var selectAll = root.querySelectorAll ? root.querySelectorAll("input[data-select-all]") : [];
    Array.prototype.forEach.call(selectAll, function (box) { box.hidden = false; });
  }

  document.addEventListener("DOMContentLoaded", function () { stamp(document); });
  document.addEventListener("htmx:load", function (event) { stamp(event.target); });

  document.addEventListener("htmx:beforeRequest", function (event) {
    var region = event.detail.elt;
    if (isLive(region) && ticked(region)) {
      event.preventDefault();
      show(region, "paused");
    }
  });

  document.addEventListener("htmx:configRequest", function (event) {
    if (isLive(event.detail.elt)) event.detail.timeout = REFRESH_TIMEOUT_MS;
  });

  document.addEventListener("htmx:beforeSwap", function (event) {
    var region = event.detail.elt;
    if (isLive(region) && ticked(region)) {
      event.detail.shouldSwap = false;
    }
  });

  function failed(event) {
    var region = event.detail.elt;
    if (isLive(region) && !ticked(region)) show(region, "stale");
  }
  document.addEventListener("htmx:sendError", failed);
  document.addEventListener("htmx:responseError", failed);
  document.addEventListener("htmx:timeout", failed);

  // Keep "30 s ago" true while the refreshes keep failing.
  setInterval(function () {
    Array.prototype.forEach.call(document.querySelectorAll(".is-stale"), function (region) {
      show(region, "stale");
    });
  }, 1000);

  document.addEventListener("change", function (event) {
    var box = event.target;
    var form = box.form;
    if (!form) return;
    var name = box.getAttribute("data-select-all");
    if (name) {
      Array.prototype.forEach.call(form.querySelectorAll("input[name='" + name + "']"), function (row) {
        row.checked = box.checked;
      });
    }
    if (name || box.name === "ids") {
      var rows = form.querySelectorAll("input[name=ids]");
      var on = form.querySelectorAll("input[name=ids]:checked").length;
      Array.prototype.forEach.call(form.querySelectorAll("input[data-select-all]"), function (all) {
        all.checked = on > 0 && on === rows.length;
        all.indeterminate = on > 0 && on < rows.length;
      });
      var region = box.closest("[hx-trigger]");
      if (isLive(region)) show(region, on ? "paused" : "live");
    }
  });
})();
