// Copies the failover.v1 protos into the package (npm pack runs this first):
// the client loads them at run time, so the package carries its own copy.
'use strict';
const fs = require('fs');
const path = require('path');
const from = path.join(__dirname, '..', '..', 'proto', 'failover', 'v1');
const to = path.join(__dirname, 'proto', 'failover', 'v1');
fs.rmSync(path.join(__dirname, 'proto'), {recursive: true, force: true});
fs.mkdirSync(to, {recursive: true});
for (const name of fs.readdirSync(from).filter((n) => n.endsWith('.proto'))) {
  fs.copyFileSync(path.join(from, name), path.join(to, name));
}
