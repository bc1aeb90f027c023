// node-zookeeper-client ships no types; the tests use it untyped (src/ describes what it calls)
declare module 'node-zookeeper-client';
