// gorm-outbox admin: small conveniences; every page works without them.
(function () {
  "use strict";
  // A click anywhere on an event row opens the event.
  document.querySelectorAll("tr[data-href]").forEach(function (tr) {
    tr.addEventListener("click", function (ev) {
      if (ev.target.closest("a, button, input, form")) return;
      window.location.href = tr.getAttribute("data-href");
    });
  });
  // The overview refreshes itself every 30s while the tab is visible.
  if (document.getElementById("counts")) {
    setInterval(function () {
      if (document.visibilityState === "visible") window.location.reload();
    }, 30000);
  }
})();
