// Browser test of the live map served by a three-node cluster: starts
// `realtime-map --cluster 3`, opens node1's page in headless Chromium,
// waits until buses of all three nodes are drawn (a colour per node),
// kills node2 with SIGKILL, and waits until every bus node2 owned is drawn
// again in another node's colour. Saves a screenshot before and after.
//
//   node cluster.mjs [path/to/realtime-map]   (default: ../../../target/release/realtime-map)
//
// Environment: CHROMIUM (default /usr/bin/chromium), ARTIFACTS (directory
// for the screenshots, default ../../../target/browser-test).

import { chromium } from "playwright-core";
import { createServer } from "node:net";
import { artifacts, chromiumPath, failer, startService } from "./service.mjs";

const fail = failer("cluster browser test");

// A port free on 127.0.0.1 (in practice free on .2 and .3 too) for the
// nodes to reach each other on.
const clusterPort = await new Promise((ok) => {
  const probe = createServer().listen(0, "127.0.0.1", () => {
    const { port } = probe.address();
    probe.close(() => ok(port));
  });
});

// node <n> pid <pid> http://<addr>:<port>, once per node.
const { child: service, found } = startService(
  [
    "--cluster", "3", "--vehicles", "300",
    "--listen", "127.0.0.1:0", "--broker-listen", "127.0.0.1:0",
    "--cluster-listen", `127.0.0.1:${clusterPort}`,
    "--lease", "3s", "--flush-every", "500ms", "--shards", "64", "--workers", "1",
  ],
  (out) => {
    const nodes = [...out.matchAll(/^node (\d+) pid (\d+) (http:\/\/\S+)$/gm)]
      .map((m) => ({ name: `node${m[1]}`, pid: Number(m[2]), url: `${m[3]}/` }));
    return nodes.length === 3 && nodes;
  },
  90,
  "the cluster",
);
let browser;
try {
  const nodes = await found;
  for (const n of nodes) console.log(`${n.name} pid ${n.pid} at ${n.url}`);

  browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(e.message));
  // The page fetches nothing from the dead node (it talks to node1 only),
  // so a console error is a real one.
  page.on("console", (m) => m.type() === "error" && pageErrors.push(m.text()));
  await page.goto(nodes[0].url);

  await page.waitForFunction(
    () => Object.keys(window.realtimeMap?.nodes ?? {}).length === 3,
    null,
    { timeout: 60_000 },
  );
  const perNode = await page.evaluate(() => window.realtimeMap.nodes);
  console.log(`buses drawn per node: ${JSON.stringify(perNode)}`);
  await page.screenshot({ path: `${artifacts}/realtime-map-cluster-before.png` });

  const victim = nodes[1];
  const theirs = await page.evaluate(
    (name) => [...window.realtimeMap.vehicles].filter(([, v]) => v.node === name).map(([id]) => id),
    victim.name,
  );
  if (!theirs.length) throw new Error(`no bus drawn as ${victim.name}'s`);
  const killedAt = Date.now();
  process.kill(victim.pid, "SIGKILL");
  console.log(`killed ${victim.name} (pid ${victim.pid}), which owned ${theirs.length} buses`);

  await page.waitForFunction(
    ({ ids, dead }) => ids.every((id) => {
      const v = window.realtimeMap.vehicles.get(id);
      return v && v.node && v.node !== dead;
    }),
    { ids: theirs, dead: victim.name },
    { timeout: 60_000 },
  );
  console.log(
    `all ${theirs.length} of ${victim.name}'s buses drawn again in another node's colour ${((Date.now() - killedAt) / 1000).toFixed(1)} s after the kill`,
  );
  const after = await page.evaluate(() => window.realtimeMap.nodes);
  console.log(`buses drawn per node: ${JSON.stringify(after)}`);
  if (victim.name in after) fail(`buses still drawn as ${victim.name}'s: ${JSON.stringify(after)}`);
  await page.waitForTimeout(1_000);
  const shot = `${artifacts}/realtime-map-cluster-after.png`;
  await page.screenshot({ path: shot });
  console.log(`screenshots: ${artifacts}/realtime-map-cluster-{before,after}.png`);

  const status = await page.textContent("#status");
  if (status !== "live") fail(`the event stream is not live: status "${status}"`);

  // node1's runtime dashboard: the cluster panel lists the two survivors,
  // which own every shard between them.
  const dashboard = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  dashboard.on("pageerror", (e) => pageErrors.push(`dashboard: ${e.message}`));
  await dashboard.goto(`${nodes[0].url}dashboard`);
  await dashboard.waitForFunction(
    () => {
      const rows = [...document.querySelectorAll("#nodes tr")];
      return !document.getElementById("cluster").hidden && rows.length === 2
        && rows.every((r) => r.dataset.node !== "node2");
    },
    null,
    { timeout: 60_000 },
  );
  const rows = await dashboard.$$eval("#nodes tr", (rs) => rs.map((r) => r.textContent));
  console.log(`node1's dashboard, cluster panel: ${rows.join(" | ")}`);
  // Its network panel: the survivor connected, the killed node not.
  await dashboard.waitForFunction(
    ({ alive, dead }) => {
      const rows = [...document.querySelectorAll("#peers tr")];
      const state = (name) => rows.find((r) => r.dataset.node === name)?.children[1].textContent ?? "";
      return !document.getElementById("network").hidden
        && state(alive).startsWith("connected (TLS)")
        && !state(dead).startsWith("connected");
    },
    { alive: nodes[2].name, dead: victim.name },
    { timeout: 60_000 },
  );
  const peers = await dashboard.$$eval("#peers tr", (rs) => rs.map((r) => r.textContent));
  console.log(`node1's dashboard, network panel: ${peers.join(" | ")}`);
  // The virtual vehicles' kind, across the nodes: both survivors hold some.
  await dashboard.click('#kinds tr[data-kind$="::VirtualVehicle"]');
  await dashboard.waitForFunction(
    ({ alive }) => {
      const view = window.troubadourDashboard.kindView;
      const count = (name) => view?.nodes.find((n) => n.node === name)?.alive ?? 0;
      return !document.getElementById("kindview").hidden && alive.every((name) => count(name) > 0);
    },
    { alive: [nodes[0].name, nodes[2].name] },
    { timeout: 60_000 },
  );
  const perNodeKind = await dashboard.$$eval("#kindnodes tr", (rs) => rs.map((r) => r.textContent));
  console.log(`node1's dashboard, VirtualVehicle across nodes: ${perNodeKind.join(" | ")}`);
  await dashboard.screenshot({ path: `${artifacts}/dashboard-cluster.png`, fullPage: true });

  if (pageErrors.length) fail(`errors in the page: ${pageErrors.join("; ")}`);
  if (!process.exitCode) console.log("cluster browser test passed");
} catch (e) {
  fail(e.message);
} finally {
  await browser?.close();
  service.kill("SIGTERM");
}
