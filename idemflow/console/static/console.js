// Disable a form's buttons once it is submitted: a double click sends one POST. The server
// also acts once per form (a one-time action id), so this only spares the second round trip.
(function () {
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.method.toLowerCase() !== "post") return;
    if (form.dataset.sent) { event.preventDefault(); return; }
    form.dataset.sent = "1";
    setTimeout(function () {
      form.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
    }, 0);
  });
  // After an action (?watch=1) a request page that is still running reloads itself every 2 s,
  // so an operator sees the workers finish it.
  if (new URLSearchParams(location.search).get("watch") === "1") {
    var shown = document.getElementById("status");
    if (shown && shown.textContent.trim() === "running") {
      setTimeout(function () { location.reload(); }, 2000);
    }
  }
})();
