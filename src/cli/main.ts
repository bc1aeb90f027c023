/** The `leasehold` command line: parses, dispatches, and turns every failure into one line and an exit code. */
import { readFileSync } from 'node:fs';
import { Command, CommanderError, Option } from 'commander';
import { redactText } from '../scrub.js';
import { CliError, EXIT, say, toCliError, usage } from './common.js';
import { demo } from './demo.js';
import { demoWorker } from './demo-worker.js';
import { elect } from './elect.js';
import { run } from './run.js';
import { release, status } from './status.js';

function version(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    return pkg.version;
  } catch {
    return 'unknown';
  }
}

const BACKEND_HELP = `
Backend: --url (repeatable: several redis:// URLs mean Redlock), else $LEASEHOLD_URL
(whitespace-separated), else the embedded default sqlite: — $XDG_STATE_HOME/leasehold/locks.db,
or ~/.local/state/leasehold/locks.db. URLs: sqlite:path, redis://, rediss://,
redis+cluster://h:p[,h:p], redis+sentinel://h:p[,h:p]/name, postgres://, zk://h:p[,h:p][/chroot],
etcd://h:p[,h:p]. Passwords in URLs are never printed.`;

const EXIT_HELP = `
Exit codes: the command's own code (128+n if signal n ended it); 64 usage; 69 backend
unavailable; 75 lock busy (held, or --wait ran out); 79 lease lost (the command was stopped);
126/127 command not executable / not found.`;

const ELECT_EXIT_HELP = `
Exit codes: the command's own code (128+n if signal n ended it; 128+n too if signal n stopped
leasehold while it campaigned); 64 usage; 69 backend unavailable; 126/127 command not executable
/ not found.`;

const collect = (v: string, prev: string[] | undefined) => [...(prev ?? []), v];

function backendOptions(cmd: Command): Command {
  return cmd
    .addOption(new Option('--url <url>', 'backend URL (repeatable)').argParser(collect))
    .option('--prefix <prefix>', 'key namespace (the library default)', 'leasehold');
}

/**
 * The command after `--` (required: without it, its options would be taken for ours): exactly
 * what follows the first `--`. A `--` after the command (`run k echo hi --`), or one taken as an
 * option's value (`run --value -- k echo hi`), leaves operands before it: refused.
 */
function commandAfterDashes(args: readonly string[], operands: string[], name: string): string[] {
  if (operands.length === 0)
    throw usage(`${name}: give the command to run after --, e.g. leasehold ${name} <key> -- ./job.sh`);
  const dashes = args.indexOf('--');
  const after = dashes < 0 ? [] : args.slice(dashes + 1);
  if (after.length !== operands.length || after.some((a, i) => a !== operands[i])) {
    throw usage(`${name}: put the command after --, e.g. leasehold ${name} <key> -- ${operands.join(' ')}`);
  }
  return operands;
}

export function program(args: readonly string[], result: { code: number }): Command {
  const p = new Command('leasehold')
    .description(
      'Distributed locks, leases and fencing tokens from the shell: run a command under a lock, elect a leader, inspect and break locks.',
    )
    .version(version(), '-V, --version')
    .showSuggestionAfterError(true)
    .exitOverride()
    .configureOutput({
      // commander quotes what it could not parse: a mistyped option may carry a URL's password
      outputError: (s, write) => write(`leasehold: ${redactText(s.replace(/^error: /, '').trim())}\n`),
    })
    .addHelpText(
      'after',
      `
Examples:
  leasehold demo                                      see it work: processes, a pause, a rejected stale write
  leasehold run nightly-report --wait 0 -- ./report.sh   once at a time; exit 75 if already running
  leasehold elect scheduler -- ./scheduler            run only while leader
  leasehold status --json                             held locks with fence, holder and time left
  leasehold release nightly-report --force            break a stuck lock
${BACKEND_HELP}`,
    );

  backendOptions(
    p
      .command('run')
      .summary('run a command while holding a lock')
      .description('Acquire <key>, run the command while renewing the lease, release when it exits.')
      .argument('<key>', 'lock name')
      .argument('[command...]', 'the command, after --')
      .option('--ttl <duration>', 'lease TTL, renewed every ttl/3 while the command runs', '30s')
      .option('--wait <duration>', 'how long to wait for the lock; 0 = one attempt (default: as long as it takes)')
      .option('--skip-if-busy', 'exit 0 (not 75) when the lock is held; one attempt unless --wait is given')
      .option('--grace <duration>', 'after SIGTERM (on a lost lease), SIGKILL after this', '10s')
      .option('--value <text>', 'holder value shown by status (default host:pid)'),
  )
    .addHelpText(
      'after',
      `
The command runs in its own process group with LEASEHOLD_KEY, LEASEHOLD_FENCE (pass it to every
write, so the resource can reject a stale holder) and LEASEHOLD_TOKEN in its environment.
SIGINT, SIGTERM and SIGHUP are passed on to it. If the lease is lost (expired, broken by
release --force), the command gets SIGTERM, then SIGKILL after --grace, and leasehold exits 79.
If leasehold itself is killed, or stopped (SIGSTOP) past its lease, a watchdog stops the
command. Ctrl-Z (SIGTSTP) stops the command with leasehold; fg/bg continues both (if the lease
ran out meanwhile: SIGTERM, exit 79). Its own session has no controlling terminal: what opens
/dev/tty (sudo, ssh prompts) fails.

Examples:
  leasehold run backup --wait 0 -- /usr/local/bin/backup.sh
  leasehold run deploy --wait 10m --ttl 1m -- sh -c 'git pull && make install'
  */5 * * * * leasehold run sync --skip-if-busy -- /opt/sync   (crontab: one at a time across hosts)
${EXIT_HELP}${BACKEND_HELP}`,
    )
    .action(async (key: string, operands: string[], flags) => {
      result.code = await run(key, commandAfterDashes(args, operands, 'run'), flags);
    });

  backendOptions(
    p
      .command('elect')
      .summary('run a command only while this process is the leader')
      .description('Campaign for <name>; while leader, run the command; on demotion stop it and campaign again.')
      .argument('<name>', 'election name')
      .argument('[command...]', 'the command, after --')
      .option('--value <text>', 'what observers see as the leader (default host:pid)')
      .option('--ttl <duration>', 'term TTL, renewed every ttl/3', '30s')
      .option('--grace <duration>', 'after SIGTERM (on demotion), SIGKILL after this', '10s'),
  )
    .addHelpText(
      'after',
      `
The command gets LEASEHOLD_KEY, LEASEHOLD_FENCE, LEASEHOLD_TOKEN and LEASEHOLD_LEADER. When it
exits by itself, leasehold resigns and exits with its code (let systemd restart it).

Examples:
  leasehold elect scheduler --value "$(hostname):8080" -- ./scheduler
  leasehold elect primary --ttl 10s --url redis://10.0.0.5:6379 -- ./run-primary.sh
${ELECT_EXIT_HELP}${BACKEND_HELP}`,
    )
    .action(async (name: string, operands: string[], flags) => {
      result.code = await elect(name, commandAfterDashes(args, operands, 'elect'), flags);
    });

  backendOptions(
    p
      .command('status')
      .summary('list held locks')
      .description('List the locks held under [prefix] with fence, holder value and time left.')
      .argument('[prefix]', 'only keys that start with this')
      .option('--json', 'print JSON (fences as strings)')
      .option('--no-color', 'no colour'),
  )
    .addHelpText(
      'after',
      `
Examples:
  leasehold status
  leasehold status report: --json | jq -r '.[].key'
  leasehold status --url postgres://app@db/app     (session backends show LEFT as "session")
${BACKEND_HELP}`,
    )
    .action(async (prefix: string | undefined, flags) => {
      result.code = await status(prefix, flags);
    });

  backendOptions(
    p
      .command('release')
      .summary('break a lock someone else holds (--force)')
      .description('Administrative break: free <key> whoever holds it. Its holder loses the lease at its next renewal.')
      .argument('<key>', 'lock name')
      .option('--force', 'yes, break it')
      .option('--json', 'print what was broken as JSON'),
  )
    .addHelpText(
      'after',
      `
Examples:
  leasehold release nightly-report --force
  leasehold release election:scheduler --force     (an election's lock is election:<name>)
${BACKEND_HELP}`,
    )
    .action(async (key: string, flags) => {
      result.code = await release(key, flags);
    });

  p.command('demo')
    .summary('watch processes coordinate, a paused holder, and a stale write rejected (no server)')
    .description(
      'Worker processes contend for one lock on a temporary embedded SQLite file; one is paused (SIGSTOP) past its TTL, the next holder gets a higher fence, and the paused worker\u2019s late write is rejected by a fenced resource.',
    )
    .option('--workers <n>', 'worker processes', '4')
    .option('--ttl <duration>', 'lease TTL', '1s')
    .option('--no-color', 'no colour')
    .addHelpText(
      'after',
      `
Examples:
  leasehold demo
  leasehold demo --workers 6 --ttl 2s
  NO_COLOR=1 leasehold demo > demo.txt

It needs no server and leaves nothing behind: the database is a temporary file.`,
    )
    .action(async (flags) => {
      result.code = await demo(flags);
    });

  p.command('demo-worker', { hidden: true })
    .argument('<db>')
    .argument('<name>')
    .argument('<ttl>')
    .argument('<jobs>')
    .argument('<work>')
    .action(async (db: string, name: string, ttl: string, jobs: string, work: string) => {
      result.code = await demoWorker({ db, name, ttl: `${ttl}ms`, jobs: Number(jobs), work: Number(work) });
    });

  return p;
}

/** Runs the CLI with `args` (without node and the script); resolves the exit code. */
export async function main(args: readonly string[]): Promise<number> {
  const result = { code: EXIT.OK as number };
  const p = program(args, result);
  try {
    await p.parseAsync(args as string[], { from: 'user' });
    return result.code;
  } catch (e) {
    if (e instanceof CommanderError) {
      // help and version exit 0; every other parse error is a usage error (already printed)
      return e.exitCode === 0 ? EXIT.OK : EXIT.USAGE;
    }
    const err = toCliError(e);
    if (err.message) say(err.message);
    return err.exitCode;
  }
}

export { CliError };
