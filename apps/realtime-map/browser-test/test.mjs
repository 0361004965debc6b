// Browser test of the live map: starts the service with a small simulated
// fleet, opens `/` in headless Chromium, waits until buses are drawn, and
// checks that at least one of them moves. Saves a screenshot.
//
//   node test.mjs [path/to/realtime-map]   (default: ../../../target/release/realtime-map)
//
// Environment: CHROMIUM (default /usr/bin/chromium), ARTIFACTS (directory
// for the screenshot, default ../../../target/browser-test).

import { chromium } from "playwright-core";
import { artifacts, chromiumPath, failer, startService } from "./service.mjs";

const fail = failer("browser test");

const { child: service, found } = startService(
  ["--listen", "127.0.0.1:0", "--broker-listen", "127.0.0.1:0", "--vehicles", "300"],
  (out) => out.match(/open (http:\/\/\S+\/)/)?.[1],
  60,
);
let browser;
try {
  const url = await found;
  console.log(`service at ${url}`);

  browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(e.message));
  page.on("console", (m) => m.type() === "error" && pageErrors.push(m.text()));
  await page.goto(url);

  await page.waitForFunction(() => window.realtimeMap?.drawn > 0, null, { timeout: 30_000 });
  const drawn = await page.evaluate(() => window.realtimeMap.drawn);
  console.log(`${drawn} buses drawn`);

  const before = await page.evaluate(() =>
    Object.fromEntries([...window.realtimeMap.vehicles].map(([id, v]) => [id, [v.to.lat, v.to.long]])),
  );
  const moved = await page.waitForFunction(
    (before) => {
      for (const [id, v] of window.realtimeMap.vehicles) {
        const b = before[id];
        if (b && (b[0] !== v.to.lat || b[1] !== v.to.long)) return id;
      }
      return false;
    },
    before,
    { timeout: 30_000 },
  );
  console.log(`bus ${await moved.jsonValue()} moved`);
  // Let the glide animation run so the screenshot shows buses on their way.
  await page.waitForTimeout(1_500);
  const shot = `${artifacts}/realtime-map.png`;
  await page.screenshot({ path: shot });
  console.log(`screenshot: ${shot}`);

  const status = await page.textContent("#status");
  if (status !== "live") fail(`the event stream is not live: status "${status}"`);
  if (pageErrors.length) fail(`errors in the page: ${pageErrors.join("; ")}`);
  if (!process.exitCode) console.log("browser test passed");
} catch (e) {
  fail(e.message);
} finally {
  await browser?.close();
  service.kill("SIGINT");
}
