// SPDX-License-Identifier: Apache-2.0
// Lints a Dockerfile with dockerfile-utils (the linter behind the VS Code Docker extension):
// unknown instructions, bad flags and arguments, malformed EXPOSE/USER/HEALTHCHECK and so on.
// hadolint is neither in Debian nor on npm. Usage: node lint_dockerfile.mjs <Dockerfile>
import fs from "node:fs";
import { validate } from "dockerfile-utils";

const file = process.argv[2];
const diagnostics = validate(fs.readFileSync(file, "utf8"));
for (const d of diagnostics) {
  console.log(`${file}:${d.range.start.line + 1}: ${d.severity === 1 ? "error" : "warning"} ${d.code}: ${d.message}`);
}
console.log(`${file}: ${diagnostics.length} diagnostics`);
process.exit(diagnostics.length === 0 ? 0 : 1);
