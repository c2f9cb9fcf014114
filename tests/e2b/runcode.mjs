// SPDX-License-Identifier: LGPL-2.1-or-later
// @e2b/code-interpreter's runCode, as its README uses it: a sandbox of the package's default
// template, then each of args.cells in order (with the callbacks counted), then contexts and a
// restart: {sandboxId, cells: [{text, results, stdout, stderr, error, count, callbacks}], ...}.
// A cell of args.cells is its code, or {code, timeoutMs, envs} for the SDK's own time limit and
// the cell's environment variables.
import { args, attempt, create, main } from './common.mjs';

// What the test compares of a result: its formats (png and html by presence and size only).
function resultOf(r) {
        return {
                isMainResult: r.isMainResult, text: r.text, json: r.json, html: r.html ? r.html.length : undefined,
                png: r.png ? r.png.length : undefined, formats: r.formats(),
        };
}

main(async () => {
        const sbx = await create(null, args.opts);
        const cells = [];
        for (const cell of args.cells) {
                // A cell is its code, or {code, timeoutMs, envs}.
                const code = typeof cell === 'string' ? cell : cell.code;
                const timeoutMs = typeof cell === 'string' ? undefined : cell.timeoutMs;
                const envs = typeof cell === 'string' ? undefined : cell.envs;
                const callbacks = [];
                const run = await attempt(() => sbx.runCode(code, {
                        ...(timeoutMs !== undefined ? { timeoutMs } : {}),
                        ...(envs !== undefined ? { envs } : {}),
                        onStdout: m => callbacks.push(['stdout', m.line]),
                        onStderr: m => callbacks.push(['stderr', m.line]),
                        onResult: r => callbacks.push(['result', r.text ?? null]),
                        onError: e => callbacks.push(['error', e.name]),
                }));
                if (run.error) {
                        cells.push({ error: run.error });
                        continue;
                }
                const x = run.value;
                cells.push({
                        text: x.text, results: x.results.map(resultOf), stdout: x.logs.stdout.join(''),
                        stderr: x.logs.stderr.join(''), count: x.executionCount, callbacks,
                        error: x.error ? { name: x.error.name, value: x.error.value, traceback: x.error.traceback } : null,
                });
        }
        const contexts = await attempt(async () => (await sbx.listCodeContexts()).map(c => c.id));
        const newContext = await attempt(() => sbx.createCodeContext({ cwd: '/tmp' }));
        let afterRestart = null;
        if (args.restart) {
                const ctx = (await sbx.listCodeContexts())[0];
                await sbx.restartCodeContext(ctx);
                afterRestart = await attempt(async () => {
                        const x = await sbx.runCode(args.restart);
                        return { text: x.text, error: x.error ? x.error.name : null, count: x.executionCount };
                });
        }
        await sbx.kill();
        const afterKill = await attempt(() => sbx.runCode('1'));
        return { sandboxId: sbx.sandboxId, cells, contexts, newContext, afterRestart, afterKill };
});
