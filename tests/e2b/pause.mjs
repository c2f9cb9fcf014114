// SPDX-License-Identifier: LGPL-2.1-or-later
// pause() and connect() as a user's program calls them. args.mode:
//  "kernel" (@e2b/code-interpreter): a variable set, pause twice, what a paused sandbox answers
//    (getInfo, list by state, isRunning, runCode, files), connect, the variable read back.
//  "files" (e2b, either version; base template): a file written, the same around a pause.
//  "busy" (@e2b/code-interpreter): a cell that burns args.cpuSeconds of CPU, printing
//    "<wall> <cpu>" every quarter CPU second; paused once two lines came, for args.pausedMs, then
//    resumed with connect: the lines as the client got them (its clock, ms) and the times around.
//  "thaw" (@e2b/code-interpreter): a cell that tries to thaw or leave its cgroup, before a pause
//    and after a resume.
//  "command" (e2b, base template): a background command printing the time every 0.1 s, paused for
//    args.pausedMs once it printed, resumed with connect, then killed: its lines as the client got
//    them, commands.list while paused and after.
//  "metrics" (@e2b/code-interpreter): getMetrics() after a cell that burnt CPU and kept memory and
//    a file, for a window in the past, and twice while paused.
// Each reports its sandbox's id as sandboxId.
import { Sandbox, args, attempt, create, main } from './common.mjs';

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function listIds(query) {
        const paginator = Sandbox.list({ query });
        const items = await paginator.nextItems();
        return items.map(i => i.sandboxId);
}

async function state(id) {
        const info = await attempt(() => Sandbox.getInfo(id));
        return info.error ? { error: info.error } : { value: info.value.state };
}

async function kernel() {
        const sbx = await create(null, { timeoutMs: 120_000, metadata: args.metadata });
        const id = sbx.sandboxId;
        const set = await sbx.runCode('x = 41\nx');
        const pause = await attempt(() => sbx.pause());
        const pauseAgain = await attempt(() => Sandbox.pause(id));
        const paused = {
                state: await state(id),
                listedPaused: await listIds({ metadata: args.metadata, state: ['paused'] }),
                listedRunning: await listIds({ metadata: args.metadata, state: ['running'] }),
                listedAll: await listIds({ metadata: args.metadata }),
                running: await attempt(() => sbx.isRunning()),
                runCode: await attempt(() => sbx.runCode('x')),
                read: await attempt(() => sbx.files.read('/home/user/nothing.txt')),
        };
        const connected = await attempt(() => Sandbox.connect(id));
        if (connected.error)
                return { sandboxId: id, set: set.text, pause, pauseAgain, paused, connected };
        const after = await connected.value.runCode('x + 1');
        return {
                sandboxId: id, set: set.text, pause, pauseAgain, paused, connected: { value: true },
                after: { text: after.text, error: after.error ? after.error.name : null, count: after.executionCount },
                stateAfter: await state(id), runningAfter: await attempt(() => connected.value.isRunning()),
        };
}

async function files() {
        const sbx = await create(null, { timeoutMs: 120_000 });
        const id = sbx.sandboxId;
        await sbx.files.write('kept.txt', 'still here');
        const pause = await attempt(() => Sandbox.pause(id));
        const pauseAgain = await attempt(() => sbx.pause());
        const paused = {
                state: await state(id),
                running: await attempt(() => sbx.isRunning()),
                read: await attempt(() => sbx.files.read('kept.txt')),
        };
        const connected = await attempt(() => Sandbox.connect(id));
        const read = connected.error ? null : await attempt(() => connected.value.files.read('kept.txt'));
        return { sandboxId: id, pause, pauseAgain, paused, connected: connected.error ?? true, read,
                 stateAfter: await state(id) };
}

async function busy() {
        const sbx = await create(null, { timeoutMs: 120_000 });
        const id = sbx.sandboxId;
        const code = [
                'import time',
                'c0 = time.process_time()',
                'last = 0.0',
                'while True:',
                '    c = time.process_time() - c0',
                '    if c >= last + 0.25:',
                '        last = c',
                '        print("%.3f %.3f" % (time.time(), c), flush=True)',
                `    if c >= ${args.cpuSeconds}:`,
                '        break',
                'done = "yes"',
        ].join('\n');
        const lines = [];
        const run = attempt(() => sbx.runCode(code, { onStdout: m => lines.push([Date.now(), m.line]) }));
        const waitFrom = Date.now();
        while (lines.length < 2 && Date.now() - waitFrom < 30_000)
                await sleep(20);
        const pauseStart = Date.now();
        const pause = await attempt(() => Sandbox.pause(id));
        const pauseEnd = Date.now();
        const state_ = await state(id);
        await sleep(args.pausedMs);
        const resumeStart = Date.now();
        const connected = await attempt(() => Sandbox.connect(id));
        const resumeEnd = Date.now();
        const result = await run;
        const after = await attempt(async () => (await sbx.runCode('done')).text);
        return {
                sandboxId: id, lines, pauseStart, pauseEnd, resumeStart, resumeEnd, pause, state: state_,
                connected: connected.error ?? true,
                result: result.error ? { error: result.error }
                                     : { error: result.value.error ? result.value.error.name : null },
                after,
        };
}

const THAW = `
import ctypes, json, os
tried = {}
paths = []
for root, dirs, names in os.walk('/sys/fs/cgroup'):
    paths += [os.path.join(root, n) for n in names if n in ('cgroup.freeze', 'cgroup.procs', 'cgroup.kill')]
paths += ['/sys/fs/cgroup/cgroup.freeze', '/sys/fs/cgroup/payload/cgroup.freeze',
          '/sys/fs/cgroup/unified/cgroup.freeze', '/sys/fs/cgroup/unified/payload/cgroup.freeze',
          '/sys/fs/cgroup/cgroup.procs', '/sys/fs/cgroup/unified/cgroup.procs']
for p in paths:
    try:
        with open(p, 'w') as f:
            f.write('0' if not p.endswith('procs') else str(os.getpid()))
        tried[p] = 'written'
    except OSError as e:
        tried[p] = e.errno
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs('/tmp/cg', exist_ok=True)
mounted = libc.mount(b'none', b'/tmp/cg', b'cgroup2', 0, None)
tried['mount cgroup2'] = 'mounted' if mounted == 0 else ctypes.get_errno()
print(json.dumps(tried))
`;

async function thaw() {
        const sbx = await create(null, { timeoutMs: 120_000 });
        const id = sbx.sandboxId;
        const cell = async () => {
                const x = await sbx.runCode(THAW);
                return x.error ? { error: x.error.name } : JSON.parse(x.logs.stdout.join(''));
        };
        const before = await cell();
        const pause = await attempt(() => sbx.pause());
        const connected = await attempt(() => Sandbox.connect(id));
        const after = await cell();
        return { sandboxId: id, before, pause, connected: connected.error ?? true, after };
}

async function metrics() {
        const sbx = await create(null, { timeoutMs: 120_000 });
        const id = sbx.sandboxId;
        const cell = await sbx.runCode([
                'import time',
                'kept = bytearray(64 * 1024 * 1024)',
                'open("/home/user/big.bin", "wb").write(b"x" * (8 * 1024 * 1024))',
                'c0 = time.process_time()',
                'while time.process_time() - c0 < 1.0:',
                '    pass',
        ].join('\n'));
        const info = await sbx.getInfo();
        const now = await attempt(() => sbx.getMetrics());
        const past = await attempt(() => Sandbox.getMetrics(id, { start: new Date(Date.now() - 3_600_000),
                                                                  end: new Date(Date.now() - 1_800_000) }));
        await sbx.pause();
        await sleep(1000);
        const paused = await attempt(() => sbx.getMetrics());
        await sleep(1000);
        const pausedAgain = await attempt(() => sbx.getMetrics());
        return { sandboxId: id, cell: cell.error ? cell.error.name : null, info, now, past, paused, pausedAgain,
                 unknown: await attempt(() => Sandbox.getMetrics('0123456789abcdef0123456789abcdef')) };
}

async function command() {
        const sbx = await create(null, { timeoutMs: 120_000 });
        const id = sbx.sandboxId;
        const lines = [];
        const handle = await sbx.commands.run('while true; do date +%s.%N; sleep 0.1; done', {
                background: true, onStdout: d => lines.push([Date.now(), d]),
        });
        const waitFrom = Date.now();
        while (lines.length < 3 && Date.now() - waitFrom < 30_000)
                await sleep(20);
        const pause = await attempt(() => sbx.pause());
        const pauseEnd = Date.now();
        const listPaused = await attempt(async () => (await sbx.commands.list()).map(p => p.pid));
        await sleep(args.pausedMs);
        const resumeStart = Date.now();
        const connected = await attempt(() => Sandbox.connect(id));
        const atResume = lines.length;
        while (lines.length < atResume + 3 && Date.now() - resumeStart < 30_000)
                await sleep(20);
        const listAfter = await attempt(async () => (await sbx.commands.list()).map(p => p.pid));
        const killed = await attempt(() => sbx.commands.kill(handle.pid));
        return { sandboxId: id, pid: handle.pid, lines, pause, pauseEnd, resumeStart, listPaused,
                 connected: connected.error ?? true, listAfter, killed };
}

main(async () => {
        const modes = { kernel, files, busy, thaw, metrics, command };
        return await modes[args.mode]();
});
