// Browser test of the runtime dashboard: starts the service with a small
// simulated fleet (and --debug-faults), opens /dashboard in headless
// Chromium, finds the Fleet supervisor in the supervision tree and opens
// its vehicles, sees the fleet's handled-message counter move, makes one
// vehicle panic and finds it with its restart count and the reason.
// Saves two screenshots.
//
//   node dashboard.mjs [path/to/realtime-map]   (default: ../../../target/release/realtime-map)
//
// Environment: CHROMIUM (default /usr/bin/chromium), ARTIFACTS (directory
// for the screenshots, default ../../../target/browser-test).

import { chromium } from "playwright-core";
import { artifacts, chromiumPath, failer, startService } from "./service.mjs";

const fail = failer("dashboard browser test");

const { child: service, found } = startService(
  ["--listen", "127.0.0.1:0", "--broker-listen", "127.0.0.1:0", "--vehicles", "300", "--debug-faults"],
  (out) => {
    const site = out.match(/open (http:\/\/\S+\/)/);
    const dashboard = out.match(/^dashboard (http:\/\/\S+)$/m);
    return site && dashboard && { site: site[1], dashboard: dashboard[1] };
  },
  60,
);
let browser;
try {
  const { site, dashboard } = await found;
  console.log(`dashboard at ${dashboard}`);

  browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(e.message));
  page.on("console", (m) => m.type() === "error" && pageErrors.push(m.text()));
  page.on("response", (r) => r.status() >= 400 && pageErrors.push(`${r.status()} for ${r.url()}`));
  const external = [];
  page.on("request", (r) => { if (!r.url().startsWith(site)) external.push(r.url()); });
  await page.goto(dashboard);
  await page.waitForFunction(() => window.troubadourDashboard?.overviews > 0, null, { timeout: 30_000 });

  // The tree: the Fleet kind at the top level, then the fleet actor, then
  // its vehicles grouped by kind, then a page of them.
  const fleetGroup = page.locator('#tree > li.group[data-kind$="::Fleet"]');
  await fleetGroup.locator(":scope > .node").click();
  const fleetActor = fleetGroup.locator("li.actor").first();
  await fleetActor.waitFor({ timeout: 30_000 });
  const fleetLabel = await fleetActor.locator(":scope > .node .label").textContent();
  if (fleetLabel !== "fleet") fail(`the fleet shows as "${fleetLabel}", not by its name`);
  await fleetActor.locator(":scope > .node").click();
  const vehicleGroup = fleetActor.locator('li.group[data-kind$="::Vehicle"]');
  await vehicleGroup.waitFor({ timeout: 30_000 });
  const groupLabel = await vehicleGroup.locator(":scope > .node .label").textContent();
  const count = Number(groupLabel.replace(/^.*×\s*/, "").replace(/,/g, ""));
  console.log(`fleet has "${groupLabel}"`);
  if (!(count > 0)) fail(`no vehicles under the fleet: "${groupLabel}"`);
  await vehicleGroup.locator(":scope > .node").click();
  await vehicleGroup.locator("li.actor").first().waitFor({ timeout: 30_000 });
  const shown = await vehicleGroup.locator("li.actor").count();
  console.log(`${shown} vehicles shown in the first page`);
  if (shown < Math.min(count, 50)) fail(`only ${shown} of ${count} vehicles in the first page`);

  // The fleet is selected: its handled-message counter moves as
  // positions arrive.
  const handled = async () =>
    Number((await page.locator('#detail [data-field="handled"]').textContent()).replace(/,/g, ""));
  await page.locator('#detail [data-field="handled"]').waitFor({ timeout: 30_000 });
  const before = await handled();
  await page.waitForFunction(
    (b) => Number(document.querySelector('#detail [data-field="handled"]').textContent.replace(/,/g, "")) > b,
    before,
    { timeout: 30_000 },
  );
  console.log(`the fleet's handled count moved from ${before} to ${await handled()}`);
  const kinds = await page.locator("#kinds tr").count();
  if (kinds < 2) fail(`the kinds table has ${kinds} rows`);
  await page.screenshot({ path: `${artifacts}/dashboard.png` });

  // One vehicle panics; found by its name, it shows the restart and why.
  await page.fill("#search", "vehicle/");
  const result = page.locator("#results > li.actor").first();
  await result.waitFor({ timeout: 30_000 });
  const name = await result.locator(":scope > .node .label").textContent();
  const id = name.replace(/^vehicle\//, "");
  const response = await fetch(`${site}debug/panic?id=${encodeURIComponent(id)}`, { method: "POST" });
  if (response.status !== 202) fail(`POST /debug/panic answered ${response.status}`);
  await result.locator(":scope > .node").click();
  await page.waitForFunction(
    () => document.querySelector('#detail [data-field="restarts"]')?.textContent === "1",
    null,
    { timeout: 30_000 },
  );
  const reason = await page.locator('#detail [data-field="last_failure"]').textContent();
  console.log(`${name}: restarted once, last failure "${reason}"`);
  if (!reason.includes("injected fault")) fail(`the last failure shows "${reason}"`);
  await page.screenshot({ path: `${artifacts}/dashboard-restart.png` });
  console.log(`screenshots: ${artifacts}/dashboard.png, ${artifacts}/dashboard-restart.png`);

  const live = await page.evaluate(() => document.getElementById("live").classList.contains("on"));
  if (!live) fail("the live stream is not connected");
  if (external.length) fail(`the page loaded from elsewhere: ${external.join(", ")}`);
  if (pageErrors.length) fail(`errors in the page: ${pageErrors.join("; ")}`);
  if (!process.exitCode) console.log("dashboard browser test passed");
} catch (e) {
  fail(e.message);
} finally {
  await browser?.close();
  service.kill("SIGINT");
}
