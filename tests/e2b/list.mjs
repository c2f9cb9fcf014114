// SPDX-License-Identifier: LGPL-2.1-or-later
// Sandbox.list({query: args.query, limit: args.limit, order: args.order}) read page by page
// while hasNext (at most args.maxPages pages, default 20): {pages: [[SandboxInfo, ...], ...],
// hasNext (after the last page read), afterEnd (what nextItems() threw once hasNext was false)},
// or {error}.
import { Sandbox, args, attempt, main } from './common.mjs';

main(async () => {
        const paginator = Sandbox.list({ query: args.query, limit: args.limit, order: args.order });
        const pages = [];
        while (paginator.hasNext && pages.length < (args.maxPages ?? 20)) {
                const page = await attempt(() => paginator.nextItems());
                if (page.error)
                        return { pages, error: page.error };
                pages.push(page.value);
        }
        const afterEnd = paginator.hasNext ? null : await attempt(() => paginator.nextItems());
        return { pages, hasNext: paginator.hasNext, afterEnd };
});
