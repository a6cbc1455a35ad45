// Buttons with data-confirm ask before their form is submitted. A file of ours rather than an
// onclick attribute, so the Content-Security-Policy can refuse every inline script.
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-confirm]");
  if (button && !window.confirm(button.getAttribute("data-confirm"))) {
    event.preventDefault();
  }
});
