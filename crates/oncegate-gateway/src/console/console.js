// Progressive enhancement for the oncegate console; every page works without it.
// A form marked data-once disables its buttons once submitted, so a double click sends
// one request (the gateway answers a second one with the first result anyway).
document.addEventListener("submit", function (event) {
  var form = event.target;
  if (!form.hasAttribute("data-once")) return;
  if (form.dataset.sent === "1") { event.preventDefault(); return; }
  form.dataset.sent = "1";
  // Disable after this event, so the clicked button's name/value is still submitted.
  setTimeout(function () {
    form.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
  }, 0);
});
