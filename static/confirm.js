// Buttons with data-confirm ask before their form is submitted. A file of ours rather than an
// onclick attribute, so the Content-Security-Policy can refuse every inline script.
// A button with data-ticked="ids" acts on the ticked boxes named ids: with none ticked it asks
// nothing (the server says that nothing is ticked), and "{ticked}" in its question becomes
// their number ("3 runs").
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-confirm]");
  if (!button) {
    return;
  }
  var question = button.getAttribute("data-confirm");
  var ticked = button.getAttribute("data-ticked");
  if (ticked && button.form) {
    var n = button.form.querySelectorAll('input[name="' + ticked + '"]:checked').length;
    if (n === 0) {
      return;
    }
    question = question.replace("{ticked}", n + (n === 1 ? " run" : " runs"));
  }
  if (!window.confirm(question)) {
    event.preventDefault();
  }
});
