// Disable a form's buttons once it is submitted: a double click sends one POST. The server
// also acts once per form (a one-time action id), so this only spares the second round trip.
document.addEventListener("submit", function (event) {
  var form = event.target;
  if (form.method.toLowerCase() !== "post") return;
  if (form.dataset.sent) { event.preventDefault(); return; }
  form.dataset.sent = "1";
  setTimeout(function () {
    form.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
  }, 0);
});
// A request page that is still moving reloads itself every 2 s (?watch=1), so an operator sees a retry finish.
if (document.body && new URLSearchParams(location.search).get("watch") === "1") {
  var status = document.getElementById("status");
  if (status && ["running"].indexOf(status.textContent.trim()) >= 0) {
    setTimeout(function () { location.reload(); }, 2000);
  }
}
