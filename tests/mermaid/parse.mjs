// Run Mermaid's own parser (mermaid.parse) on the diagrams make_page.py wrote, in node.
// Mermaid expects a DOM (DOMPurify), so jsdom provides one. See README.md here.
//
//   cd /tmp/mermaid-check && node /path/to/tests/mermaid/parse.mjs diagrams.json
//
// Exits 0 when every diagram parses, 1 otherwise, printing one line per diagram.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const require = createRequire(pathToFileURL(process.cwd() + '/'));
const { JSDOM } = require('jsdom');
const dom = new JSDOM('<!doctype html><html><body></body></html>');
globalThis.window = dom.window;
globalThis.document = dom.window.document;
for (const name of ['DOMParser', 'Element', 'HTMLElement', 'Node', 'navigator']) {
  if (!(name in globalThis)) globalThis[name] = dom.window[name];
}

const mermaid = (await import(pathToFileURL(require.resolve('mermaid')).href)).default;
mermaid.initialize({ startOnLoad: false, securityLevel: 'strict' });

const diagrams = JSON.parse(readFileSync(process.argv[2] ?? 'diagrams.json', 'utf8'));
let failed = 0;
for (const [name, source] of Object.entries(diagrams)) {
  try {
    const result = await mermaid.parse(source);
    console.log(`ok     ${name}: ${result.diagramType}`);
  } catch (error) {
    failed += 1;
    console.log(`FAILED ${name}: ${String(error.message ?? error).split('\n').join(' ')}`);
  }
}
process.exit(failed ? 1 : 0);
