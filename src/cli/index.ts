#!/usr/bin/env node
/** The `leasehold` executable. */
import { main } from './main.js';

process.exit(await main(process.argv.slice(2)));
