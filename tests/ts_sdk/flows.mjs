// Flows of the official TypeScript SDK (@nodeops-createos/sandbox), driven unchanged
// against a CreateOS API: the emulator, in tests/ts_sdk/test_ts_sdk.py.
//
//   CREATEOS_TS_SDK_DIR=<dir holding node_modules> CREATEOS_SANDBOX_BASE_URL=... \
//   CREATEOS_SANDBOX_API_KEY=... node flows.mjs [FLOW...]
//
// Each flow prints one JSON line {"flow", "ok", "error"?, "ms"}; the exit status is 0
// whatever the flows did (the test reads the lines). `--list` prints the flow names.
// Every sandbox, disk, network and template a flow makes is removed at its end.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const FLOWS = {};
const flow = (name, run) => { FLOWS[name] = run; };


function describe(err) {
  const kind = err?.constructor?.name ?? typeof err;
  const status = err?.statusCode ? ` (HTTP ${err.statusCode})` : "";
  return `${kind}${status}: ${String(err?.message ?? err).slice(0, 600)}`;
}

function withTimeout(promise, ms, name) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`flow ${name} took over ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

function check(condition, what) {
  if (!condition) throw new Error(`check failed: ${what}`);
}

async function rejects(promise, errorClass, what) {
  try {
    await promise;
  } catch (err) {
    check(err instanceof errorClass, `${what}: ${errorClass.name} expected, got ${describe(err)}`);
    return err;
  }
  throw new Error(`${what}: ${errorClass.name} expected, but it succeeded`);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** One flow's client and what it must remove at its end. */
class Kit {
  constructor(sdk, cleanup) {
    this.sdk = sdk;
    this.client = new sdk.CreateosSandboxClient({ timeoutMs: 60_000 });
    this.cleanup = cleanup;
  }

  /** A running sandbox (devbox:1 unless said otherwise), destroyed at the flow's end. */
  async box(request = {}) {
    const sandbox = await this.client.createSandbox({ shape: "s-1vcpu-1gb", rootfs: "devbox:1", ...request });
    this.cleanup.push(() => sandbox.destroy());
    return sandbox;
  }

  /** stdout of a bash script that must succeed. */
  async sh(sandbox, script) {
    return (await sandbox.sh(script)).result.stdout;
  }
}

function noNulls(view, what) {
  for (const [key, value] of Object.entries(view)) {
    check(value !== null, `${what}.${key} is null (the service omits such fields)`);
  }
}

async function loadFlows(sdk) {
  const E = sdk ?? {};

  flow("catalog", async (k) => {
    const health = await k.client.healthz();
    check(health.up === true, `healthz says up: ${JSON.stringify(health)}`);
    const ready = await k.client.readyz();
    check(ready.ready === true, `readyz says ready: ${JSON.stringify(ready)}`);
    const shapes = await k.client.listShapes();
    check(shapes.some((s) => s.id === "s-1vcpu-1gb" && s.mem_mib === 1024), "shape s-1vcpu-1gb");
    const rootfs = await k.client.listRootfs();
    check(rootfs.rootfs.includes("devbox:1"), `devbox:1 in ${rootfs.rootfs}`);
    for (const entry of rootfs.entries ?? []) noNulls(entry, `rootfs ${entry.name}`);
    const hosts = await k.client.listHosts();
    check(Array.isArray(hosts) && hosts.length >= 1 && hosts[0].status === "active", "a host");
    const me = await k.client.whoami();
    check(typeof me.user_id === "string" && typeof me.stats.total === "number", "whoami");
  });

  flow("create-devbox", async (k) => {
    const box = await k.box({ name: `ts-${Date.now().toString(36)}`, envs: { GREETING: "hi" } });
    check(box.status === "running" && /^\d+\.\d+\.\d+\.\d+$/.test(box.ip ?? ""), "running, with an ip");
    check(box.data.rootfs === "devbox:1", "rootfs devbox:1");
    check(!("ingress_url_template" in box.data), "no ingress_url_template without ingress");
    noNulls(box.data, "creation answer");
    const view = (await k.client.getSandbox(box.id)).data;
    noNulls(view, "sandbox view");
    check(view.status === "running" && view.name === box.name, "the view names it");
    check(JSON.stringify(view.envs) === JSON.stringify(["GREETING"]), `envs names: ${view.envs}`);
    check(Array.isArray(view.ssh_pubkeys), "ssh_pubkeys");
    const out = await k.sh(box, 'echo "$GREETING from $(pwd)"');
    check(out.startsWith("hi from /"), `env in exec: ${out}`);
  });

  flow("names", async (k) => {
    const name = `dup-${Date.now().toString(36)}`;
    await k.box({ name });
    const err = await rejects(k.client.createSandbox({ shape: "s-1vcpu-1gb", rootfs: "devbox:1", name }),
      E.CreateosSandboxValidationError, "a name a live sandbox holds");
    check(/name/.test(err.message), `the reason names the name: ${err.message}`);
    await rejects(k.client.createSandbox({ shape: "s-1vcpu-1gb", name: "x".repeat(23) }),
      E.CreateosSandboxValidationError, "a 23-character name");
  });

  flow("exec", async (k) => {
    const box = await k.box();
    const done = await box.runCommand("sh", ["-c", "echo out; echo err >&2; exit 3"]);
    check(done.result.stdout === "out\n" && done.result.stderr === "err\n", "both streams");
    check(done.result.exit_code === 3 && typeof done.exec_ms === "number", "exit code 3");
    await rejects(box.sh("exit 7", { label: "seven" }), E.CreateosSandboxError, "sh of a failing script");
    const missing = await box.runCommand("no-such-program-here");
    check(missing.result.exit_code !== 0, "a missing program fails");
  });

  flow("exec-stream", async (k) => {
    const box = await k.box();
    const events = [];
    for await (const event of box.streamCommand("bash", ["-c", "for i in 1 2 3; do echo line $i; sleep 0.1; done; echo bye >&2; exit 4"])) {
      events.push(event);
    }
    const stdout = events.filter((e) => e.type === "stdout").map((e) => e.data).join("");
    const stderr = events.filter((e) => e.type === "stderr").map((e) => e.data).join("");
    check(stdout === "line 1\nline 2\nline 3\n" && stderr === "bye\n", `streamed: ${stdout}|${stderr}`);
    check(events.at(-1).type === "exit" && events.at(-1).exitCode === 4, "exit event last");
  });

  flow("files", async (k) => {
    const box = await k.box();
    await box.files.upload("/workspace/note.txt", "héllo\n");
    check(await k.sh(box, "cat /workspace/note.txt") === "héllo\n", "uploaded text read by a command");
    const bytes = new Uint8Array(256).map((_, i) => i);
    await box.files.upload("/tmp/bytes.bin", bytes);
    const back = new Uint8Array(await box.files.download("/tmp/bytes.bin"));
    check(back.length === 256 && back.every((b, i) => b === i), "binary round trip");
    await k.sh(box, "mkdir -p /workspace/out && printf made > /workspace/out/r.txt");
    const made = new TextDecoder().decode(await box.files.download("/workspace/out/r.txt"));
    check(made === "made", "a command's file downloaded");
    await rejects(box.files.download("/workspace/none.txt"), E.CreateosSandboxNotFoundError, "a missing file");
  });

  flow("pause-resume", async (k) => {
    const box = await k.box();
    // A counter an exec leaves running: it must stop while paused and go on after.
    await k.sh(box, "nohup bash -c 'while :; do echo t >> /tmp/ticks; sleep 0.05; done' >/dev/null 2>&1 &");
    const ticks = async () => Number((await k.sh(box, "wc -l < /tmp/ticks")).trim());
    await sleep(300);
    check(await ticks() > 0, "the counter runs after its exec answered");
    await box.pause();
    await box.waitUntilPaused({ timeoutMs: 30_000 });
    check(box.status === "paused", "paused");
    await rejects(box.runCommand("true"), E.CreateosSandboxValidationError, "exec while paused");
    await box.resume();
    await box.waitUntilRunning({ timeoutMs: 30_000 });
    const resumed = await ticks();
    await sleep(300);
    check(await ticks() > resumed, "a background process lives through pause and resume");
  });

  flow("background-server", async (k) => {
    const box = await k.box();
    await k.sh(box, "mkdir -p /tmp/site && echo served > /tmp/site/index.html && "
      + "cd /tmp/site && nohup python3 -m http.server 8731 > /tmp/server.log 2>&1 &");
    await box.waitForPortReady(8731, { timeoutMs: 20_000 });
    const page = await k.sh(box, "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8731/').read().decode(), end='')\"");
    check(page === "served\n", `the server an exec started answers: ${page}`);
  });

  flow("fork", async (k) => {
    const box = await k.box({ envs: { ROLE: "source" } });
    await k.sh(box, "echo kept > /workspace/state.txt");
    const fork = await box.fork({ envs: { ROLE: "fork" } });
    k.cleanup.push(() => fork.destroy());
    await fork.waitUntilRunning({ timeoutMs: 30_000 });
    check(fork.id !== box.id && fork.data.forked_from === box.id, "a new sandbox, forked from the source");
    check(await k.sh(fork, "cat /workspace/state.txt; echo $ROLE") === "kept\nfork\n", "files copied, env changed");
    await k.sh(fork, "echo changed > /workspace/state.txt");
    check(await k.sh(box, "cat /workspace/state.txt") === "kept\n", "the source is untouched");
    const paused = await box.fork({ start_paused: true });
    k.cleanup.push(() => paused.destroy());
    await paused.waitUntilPaused({ timeoutMs: 30_000 });
  });

  for (const base of ["nodeops/sandbox:debian", "debian:trixie-slim"]) {
    flow(`template-${base.split(/[/:]/)[0]}`, async (k) => {
      const template = await k.client.templates.create({
        name: `ts-tpl-${Date.now().toString(36)}`,
        dockerfile: `FROM ${base}\nENV TPL_MARK=baked\nRUN mkdir -p /workspace && echo built > /workspace/marker\n`,
      });
      k.cleanup.push(() => k.client.templates.delete(template.id));
      let last;
      for await (const event of k.client.templates.followLogs(template.id)) {
        last = event;
        if (event.final) break;
      }
      check(last?.final && last.status === "ready", `build ended ready: ${JSON.stringify(last)}`);
      const ready = await k.client.templates.get(template.id, { include: "dockerfile" });
      check(ready.status === "ready" && ready.dockerfile.startsWith("FROM"), "template ready");
      check((await k.client.templates.logs(template.id)).length > 0, "logs as text");
      check((await k.client.templates.list()).some((t) => t.id === template.id), "listed");
      const box = await k.box({ rootfs: template.id });
      check(await k.sh(box, "cat /workspace/marker; echo $TPL_MARK") === "built\nbaked\n", "made from it");
    });
  }

  flow("egress", async (k) => {
    const box = await k.box({ egress: ["pypi.org", "10.0.0.0/8"] });
    const view = await box.getEgress();
    check(view.id === box.id && JSON.stringify(view.egress) === '["pypi.org","10.0.0.0/8"]', `egress view ${JSON.stringify(view)}`);
    const changed = await box.setEgress(["*.github.com"]);
    check(JSON.stringify(changed.egress) === '["*.github.com"]', "replaced");
    const open = await box.setEgress(null);
    check(Array.isArray(open.egress) && open.egress.length === 0, "null: allow all");
  });

  flow("ingress-preview", async (k) => {
    const box = await k.box({ ingress_enabled: true });
    check(box.data.ingress_url_template?.includes("<port>"), "a template with <port>");
    await k.sh(box, "mkdir -p /tmp/www && echo preview-ok > /tmp/www/index.html && "
      + "cd /tmp/www && nohup python3 -m http.server 8732 >/dev/null 2>&1 &");
    await box.waitForPortReady(8732, { timeoutMs: 20_000 });
    const url = box.previewUrl(8732, { scheme: "http" });
    let body = "";
    for (let i = 0; i < 50 && body !== "preview-ok\n"; i++) {
      const response = await fetch(url).catch(() => null);
      body = response?.ok ? await response.text() : "";
      if (body !== "preview-ok\n") await sleep(100);
    }
    check(body === "preview-ok\n", `the preview URL serves the sandbox's port: ${url}`);
    await box.setIngress(false);
    check(!("ingress_url_template" in box.data), "no template once ingress is off");
    let refused = false;
    try { box.previewUrl(8732); } catch { refused = true; }
    check(refused, "previewUrl refuses without ingress");
    await box.setIngress(true);
    check(box.previewUrl(8732).includes("8732"), "the template is back");
  });

  flow("disks", async (k) => {
    const name = `ts-disk-${Date.now().toString(36)}`;
    const disk = await k.client.disks.create({
      name, kind: "s3",
      config: { bucket: "bucket", endpoint: "https://s3.example.com", region: "eu-1" },
      credentials: { access_key: "AKIATEST", secret_key: "not-a-real-secret" },
    });
    k.cleanup.push(() => k.client.disks.delete(name));
    check(disk.id.startsWith("disk_") && !JSON.stringify(disk).includes("not-a-real-secret"), "no secret in the view");
    check((await k.client.disks.get(name)).id === disk.id, "found by name");
    const box = await k.box({ disks: [{ disk_id: name, mount_path: "/mnt/data" }] });
    const mounts = await box.listDisks();
    check(mounts.length === 1 && mounts[0].mount_path === "/mnt/data" && mounts[0].disk_id === disk.id, `mounted: ${JSON.stringify(mounts)}`);
    await k.sh(box, "echo persisted > /mnt/data/file.txt");
    check((await box.detachDisk({ diskId: disk.id, mountPath: "/mnt/data" })).detached === true, "detached");
    const other = await k.box();
    await other.attachDisk({ diskId: name, mountPath: "/data" });
    check(await k.sh(other, "cat /data/file.txt") === "persisted\n", "the file is in the bucket");
    await other.detachDisk({ diskId: disk.id, mountPath: "/data" });
    await k.client.disks.rotateCredentials(name, { access_key: "AKIA2", secret_key: "other-secret" });
    check((await k.client.disks.list()).some((d) => d.name === name), "listed");
  });

  flow("networks", async (k) => {
    const network = await k.client.networks.create({ name: `ts-net-${Date.now().toString(36)}` });
    k.cleanup.push(async () => {
      for (let i = 0; ; i++) {  // "in use" for a few seconds after its members go
        try { return await k.client.networks.delete(network.id); } catch (err) { if (i > 50) throw err; }
        await sleep(200);
      }
    });
    const a = await k.box();
    const b = await k.box({ networks: [{ id: network.id }] });
    await a.attachNetwork(network.id);
    let members = [];
    for (let i = 0; i < 50 && !(members.length === 2 && members.every((m) => m.ip)); i++) {
      members = (await k.client.networks.get(network.id)).members ?? [];
      if (members.length < 2) await sleep(100);
    }
    check(members.length === 2, `two members: ${JSON.stringify(members)}`);
    check((await k.client.networks.list()).some((n) => n.id === network.id), "listed");
    await a.detachNetwork(network.id);
    await b.detachNetwork(network.id);
  });

  flow("access-token", async (k) => {
    const box = await k.box();
    const other = await k.box();
    const minted = await k.client.http.request("POST", `/v1/sandboxes/${box.id}/access-token`);
    check(typeof minted.token === "string" && minted.token.length > 20, "a token");
    const scoped = new E.CreateosSandboxClient({ apiKey: minted.token });
    const seen = await scoped.getSandbox(box.id);
    check(seen.id === box.id, "the token reads its sandbox");
    check(await k.sh(seen, "echo via-token") === "via-token\n", "and runs commands in it");
    await rejects(scoped.getSandbox(other.id), E.CreateosSandboxNotFoundError, "another sandbox");
    await k.client.http.request("DELETE", `/v1/sandboxes/${box.id}/access-token`);
    await rejects(scoped.getSandbox(box.id), E.CreateosSandboxAuthError, "a disabled token");
  });

  flow("resize", async (k) => {
    const box = await k.box({ disk_mib: 1024 });
    const grown = await box.resize(2048);
    check(grown.id === box.id && grown.disk_mib === 2048 && box.data.disk_mib === 2048, "grown");
    await rejects(box.resize(512), E.CreateosSandboxValidationError, "a shrink");
  });

  flow("bandwidth", async (k) => {
    const box = await k.box();
    const before = await box.getBandwidth();
    check(before.id === box.id && typeof before.quota_bytes === "number", `bandwidth ${JSON.stringify(before)}`);
    const after = await box.rechargeBandwidth(1_000_000);
    check(after.quota_bytes === before.quota_bytes + 1_000_000, "recharged");
  });

  flow("ssh-pubkeys", async (k) => {
    const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBqDwxzQ4M6TQlSgm0wTT2n0Mv3P7l1c9sF1uLkvX7yN ts@flows";
    const box = await k.box({ ssh_pubkeys: [key] });
    check(JSON.stringify(box.data.ssh_pubkeys) === JSON.stringify([key]), "keys at creation");
    const second = key.replace("ts@flows", "second@flows");
    const added = await box.addSSHPubkeys([second]);
    check(typeof added.count === "number" && added.count >= 1, `count ${JSON.stringify(added)}`);
    const view = (await box.refresh()).data;
    check(view.ssh_pubkeys.includes(second), "listed in the view");
  });

  flow("by-ip", async (k) => {
    const box = await k.box();
    const found = await k.client.getSandboxByIP(box.ip);
    check(found.id === box.id, "found by its ip");
    await rejects(k.client.getSandboxByIP("10.255.255.254"), E.CreateosSandboxNotFoundError, "an unknown ip");
  });

  flow("list-pages", async (k) => {
    const first = await k.box();
    const second = await k.box();
    const listed = (await k.client.listSandboxes()).map((s) => s.id);
    check(listed.includes(first.id) && listed.includes(second.id), "both listed");
    check((await k.client.listSandboxes({ limit: 1 })).length === 1, "a cap of one");
    const page = await k.client.http.request("GET", "/v1/sandboxes", { query: { limit: 1000, offset: 0 } });
    check(page.pagination.limit === 500 && page.pagination.count === page.data.length, `clamped: ${JSON.stringify(page.pagination)}`);
    const seen = [];
    for await (const s of k.client.iterateSandboxes({ status: "running" })) seen.push(s.id);
    check(seen.includes(first.id), "iterated");
  });

  flow("auto-pause", async (k) => {
    const box = await k.box({ auto_pause_after_seconds: 600 });
    check(box.data.auto_pause_after_seconds === undefined || box.data.auto_pause_after_seconds === 600, "as asked");
    await box.setAutoPause(120);
    check(box.data.auto_pause_after_seconds === 120, "changed");
    await box.setAutoPause(null);
    check(!("auto_pause_after_seconds" in box.data), "omitted once disabled");
  });

  flow("destroy", async (k) => {
    const box = await k.client.createSandbox({ shape: "s-1vcpu-1gb", rootfs: "devbox:1" });
    const first = await box.destroy();
    check(first.id === box.id && ["destroying", "destroyed"].includes(first.status), `first ${JSON.stringify(first)}`);
    await box.waitUntilDestroyed({ timeoutMs: 30_000 });
    const again = await box.destroy();
    check(again.status === "destroyed", `a second destroy: ${JSON.stringify(again)}`);
    check((await k.client.getSandbox(box.id)).status === "destroyed", "still read as destroyed");
  });

  flow("errors", async (k) => {
    const stranger = new E.CreateosSandboxClient({ apiKey: "not-the-key", retry: false });
    await rejects(stranger.whoami(), E.CreateosSandboxAuthError, "a wrong key");
    await rejects(k.client.getSandbox("sb-0000000000000000"), E.CreateosSandboxNotFoundError, "an unknown sandbox");
    const bad = await rejects(k.client.createSandbox({ shape: "s-no-such-shape" }), E.CreateosSandboxValidationError, "an unknown shape");
    check(/shape/.test(bad.message), `the reason reaches the message: ${bad.message}`);
    const rootfs = await rejects(k.client.createSandbox({ shape: "s-1vcpu-1gb", rootfs: "no-such-rootfs:9" }), E.CreateosSandboxValidationError, "an unknown rootfs");
    check(/rootfs/.test(rootfs.message), `the reason reaches the message: ${rootfs.message}`);
    const box = await k.box();
    const env = await rejects(k.client.http.request("POST", `/v1/sandboxes/${box.id}/exec`, { body: { cmd: "true", env: { UNDECLARED: "1" } } }),
      E.CreateosSandboxValidationError, "an env key not declared at creation");
    check(/env/.test(env.message), `the reason: ${env.message}`);
    await rejects(k.client.templates.get("tpl-0000000000000000"), E.CreateosSandboxNotFoundError, "an unknown template");
  });

  flow("users", async (k) => {
    const box = await k.box();
    const out = await k.sh(box, "useradd -m alice && runuser -u alice -- id -un && "
      + "su -s /bin/sh alice -c 'id -un' && echo secret > /tmp/only-root && chmod 600 /tmp/only-root && "
      + "(runuser -u alice -- cat /tmp/only-root 2>/dev/null && echo READ || echo DENIED)");
    check(out === "alice\nalice\nDENIED\n", `users and file modes: ${JSON.stringify(out)}`);
  });
}

async function main() {
  if (process.argv.includes("--list")) {
    await loadFlows(null);
    console.log(JSON.stringify(Object.keys(FLOWS)));
    process.exit(0);
  }

  const sdkDir = process.env.CREATEOS_TS_SDK_DIR;
  if (!sdkDir) {
    console.error("CREATEOS_TS_SDK_DIR must name the directory the SDK is installed in");
    process.exit(2);
  }
  const entry = join(sdkDir, "node_modules", "@nodeops-createos", "sandbox", "dist", "index.js");
  const sdk = await import(pathToFileURL(entry).href);
  await loadFlows(sdk);

  const wanted = process.argv.slice(2).filter((a) => !a.startsWith("--"));
  for (const name of wanted.length ? wanted : Object.keys(FLOWS)) {
    const started = Date.now();
    const cleanup = [];
    let line;
    try {
      await withTimeout(FLOWS[name](new Kit(sdk, cleanup)), 120_000, name);
      line = { flow: name, ok: true };
    } catch (err) {
      line = { flow: name, ok: false, error: describe(err) };
    }
    for (const undo of cleanup.reverse()) {
      try { await undo(); } catch (err) { line.cleanup = describe(err); }
    }
    line.ms = Date.now() - started;
    console.log(JSON.stringify(line));
  }
  process.exit(0);
}

await main();
