// Copy buttons (data-copy="the id of the element whose text they copy"): shown only with
// JavaScript, which they need; without it the text is there to select. A file of ours, not an
// inline script, so the Content-Security-Policy can refuse every inline script.
(function () {
  "use strict";
  function show(root) {
    root.querySelectorAll("button[data-copy]").forEach(function (button) { button.hidden = false; });
  }
  function said(button, words) {
    button.textContent = words;
    setTimeout(function () { button.textContent = "Copy"; }, 2000);
  }
  document.addEventListener("DOMContentLoaded", function () { show(document); });
  document.addEventListener("htmx:afterSwap", function (event) { show(event.target); });
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-copy]");
    if (!button) return;
    var text = document.getElementById(button.getAttribute("data-copy")).textContent;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { said(button, "Copied"); },
                                                 function () { said(button, "Select and copy"); });
    } else {
      said(button, "Select and copy");  // no clipboard over plain http: the text stays selectable
    }
  });
})();
