// Shows whether the origin answers /healthz.
(async () => {
  const el = document.getElementById("health");
  try {
    const response = await fetch("/healthz", { cache: "no-store" });
    const body = await response.json();
    el.dataset.state = response.ok && body.status === "ok" ? "ok" : "down";
    el.textContent = el.dataset.state === "ok" ? "The origin is up." : `The origin answered ${response.status}.`;
  } catch (error) {
    el.dataset.state = "down";
    el.textContent = "The origin does not answer.";
  }
})();
