// node_client.js — ioredis and node-redis (npm `redis`) against sluice's
// RESP port, each with its default settings, for resp_clients.sh.
//
//   node node_client.js LIB PORT basic          LIB: ioredis | node-redis
//   node node_client.js LIB PORT reconnect DIR  as py_client.py's
//   node node_client.js node-redis PORT resp3   createClient({RESP: 3})
//
// Prints one line per check: "ok NAME" or "FAIL NAME: why".
'use strict';
const fs = require('fs');
const path = require('path');

const [lib, port, mode, dir] = process.argv.slice(2);
const tag = lib + ': ';

async function check(name, fn) {
  try {
    const got = await fn();
    console.log(got === true ? 'ok ' + tag + name
                             : 'FAIL ' + tag + name + ': got ' + JSON.stringify(got));
  } catch (e) {
    console.log('FAIL ' + tag + name + ': ' + e.name + ': ' + e.message);
  }
}

async function rejects(p, kind, text) {
  try {
    await p;
  } catch (e) {
    // the class or one it extends (node-redis: SimpleError < ErrorReply)
    let k = Object.getPrototypeOf(e), names = [];
    for (; k && k.constructor !== Object; k = Object.getPrototypeOf(k)) names.push(k.constructor.name);
    if (!names.includes(kind)) return 'error type ' + names.join(' < ');
    return e.message.includes(text) ? true : 'wrong message ' + e.message;
  }
  return 'no error';
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The library's calls, one shape for both.
function wrap() {
  if (lib === 'ioredis') {
    const Redis = require('ioredis');
    const r = new Redis({ host: '127.0.0.1', port: +port });
    r.on('error', () => {}); // reconnecting: reported by the checks
    return {
      ready: () => new Promise((ok) => r.once('ready', ok)),
      cmd: (...a) => r.call(...a),
      multi: async (cmds) => (await cmds.reduce((m, c) => m.call(...c), r.multi()).exec())
        .map(([err, v]) => { if (err) throw err; return v; }),
      pipeline: async (cmds) => (await cmds.reduce((m, c) => m.call(...c), r.pipeline()).exec())
        .map(([err, v]) => { if (err) throw err; return v; }),
      errType: 'ReplyError',
      close: () => r.disconnect(),
    };
  }
  const { createClient } = require('redis');
  const opts = { url: `redis://127.0.0.1:${port}` };
  if (mode === 'resp3') opts.RESP = 3;
  const r = createClient(opts);
  r.on('error', () => {});
  return {
    ready: () => r.connect(),
    cmd: (...a) => r.sendCommand(a.map(String)),
    multi: (cmds) => cmds.reduce((m, c) => m.addCommand(c.map(String)), r.multi()).exec(),
    pipeline: (cmds) => cmds.reduce((m, c) => m.addCommand(c.map(String)), r.multi())
      .execAsPipeline(),
    errType: 'ErrorReply',
    close: () => r.destroy(),
  };
}

async function basic(c) {
  await check('connect (PING)', async () => (await c.cmd('PING')) === 'PONG');
  await check('CL.THROTTLE, redis-cell\'s figures', async () =>
    same(await c.cmd('CL.THROTTLE', lib + ':a:' + process.pid, 15, 30, 60), [0, 16, 15, -1, 2]));
  const t = [1, 2, 3].map(() => ['CL.THROTTLE', lib + ':t:' + process.pid, 1, 1, 60]);
  await check('multi(): MULTI ... EXEC, replies in order', async () =>
    same((await c.multi(t)).map((x) => x[0]), [0, 0, 1]));
  await check('pipeline', async () =>
    same((await c.pipeline([['SL.THROTTLE', lib + ':p', 'gcra:10/s'], ['PING']]))
      .map((x) => (Array.isArray(x) ? x[0] : x)), [1, 'PONG']));
  await check('an error is the library\'s error type', () =>
    rejects(c.cmd('CL.THROTTLE', 'k', 1, 0, 1), c.errType,
      'Cell error: Store error: Zero rates are not supported'));
  await check('a queueing error aborts EXEC', () =>
    rejects(c.multi([['NOSUCH'], ['PING']]), c.errType,
      lib === 'ioredis' ? 'EXECABORT' : "unknown command 'NOSUCH'"));
  await check('the connection is fine after it', async () =>
    (await c.cmd('PING')) === 'PONG');
  await check('INFO stats', async () =>
    /total_commands_processed:[1-9]/.test(String(await c.cmd('INFO', 'stats'))));
  await check('CLIENT ID', async () => Number.isInteger(await c.cmd('CLIENT', 'ID')));
}

async function resp3(c) {
  await check('HELLO 3 on connect, then PING', async () => (await c.cmd('PING')) === 'PONG');
  await check('CLIENT INFO says resp=3', async () =>
    / resp=3 /.test(String(await c.cmd('CLIENT', 'INFO'))));
  await check('CLIENT GETNAME: a RESP3 null', async () => (await c.cmd('CLIENT', 'GETNAME')) === null);
  await check('a throttle in a transaction', async () =>
    (await c.multi([['CL.THROTTLE', 'r3:t', 1, 1, 60]]))[0][0] === 0);
  await check('INFO as RESP3 text', async () =>
    /# Server/.test(String(await c.cmd('INFO', 'server'))));
}

async function reconnect(c) {
  await check('connected before the restart', async () => (await c.cmd('PING')) === 'PONG');
  fs.writeFileSync(path.join(dir, lib + '.ready'), '');
  const deadline = Date.now() + 30000;
  while (!fs.existsSync(path.join(dir, 'restarted'))) {
    if (Date.now() > deadline) { console.log('FAIL ' + tag + 'reconnect: sluice never came back'); return; }
    await sleep(100);
  }
  let last;
  while (Date.now() < deadline) {
    try {
      if ((await c.cmd('PING')) === 'PONG') { console.log('ok ' + tag + 'reconnects after sluice restarted'); return; }
    } catch (e) { last = e; }
    await sleep(200);
  }
  console.log('FAIL ' + tag + 'reconnect: ' + (last && last.message));
}

(async () => {
  const c = wrap();
  const t = setTimeout(() => { console.log('FAIL ' + tag + 'timed out'); process.exit(1); }, 60000);
  try {
    await c.ready();
    if (mode === 'basic') await basic(c);
    else if (mode === 'resp3') await resp3(c);
    else await reconnect(c);
  } catch (e) {
    console.log('FAIL ' + tag + mode + ': ' + e.message);
  }
  clearTimeout(t);
  c.close();
})();
