// What the browser tests share: where the binary, Chromium and the
// screenshots are, how a failure is reported, and starting the service
// until it prints what the test needs.

import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

/// The realtime-map binary: the script's first argument, or the release build.
export const binary = resolve(process.argv[2] ?? `${here}/../../../target/release/realtime-map`);
/// Where screenshots go (ARTIFACTS, default target/browser-test), created.
export const artifacts = resolve(process.env.ARTIFACTS ?? `${here}/../../../target/browser-test`);
mkdirSync(artifacts, { recursive: true });
/// Chromium (CHROMIUM, default /usr/bin/chromium).
export const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";

/// A failure reporter: prints `<what> FAILED: <message>` and makes the
/// process exit non-zero, letting the test finish its clean-up.
export function failer(what) {
  return (message) => {
    console.error(`${what} FAILED: ${message}`);
    process.exitCode = 1;
  };
}

/// Starts the binary with `args`, its stderr inherited. Resolves with
/// `{ child, found }` once `find(stdout so far)` returns something;
/// rejects if the process exits first or `seconds` pass.
export function startService(args, find, seconds, what = "the service") {
  const child = spawn(binary, args, { stdio: ["ignore", "pipe", "inherit"] });
  const found = new Promise((ok, err) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      const value = find(out);
      if (value) ok(value);
    });
    child.on("exit", (code) => err(new Error(`${what} exited (${code}) before it was ready`)));
    setTimeout(() => err(new Error(`${what} was not ready within ${seconds} s`)), seconds * 1000);
  });
  return { child, found };
}
