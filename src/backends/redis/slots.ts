/**
 * Redis Cluster hash slots: CRC16 (XMODEM) of the key's hash tag, mod 16384, as the server
 * computes it. Used to batch renewals per slot and per node.
 */
const TABLE = (() => {
  const t = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i << 8;
    for (let b = 0; b < 8; b++) c = c & 0x8000 ? ((c << 1) ^ 0x1021) & 0xffff : (c << 1) & 0xffff;
    t[i] = c;
  }
  return t;
})();

function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const b of bytes) crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ b) & 0xff]!;
  return crc;
}

/** The hash slot (0..16383) of a Redis key: only the first non-empty `{…}` counts when present. */
export function slotOf(key: string): number {
  const bytes = Buffer.from(key, 'utf8');
  const open = bytes.indexOf(0x7b); // {
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1); // }
    if (close > open + 1) return crc16(bytes.subarray(open + 1, close)) & 16383;
  }
  return crc16(bytes) & 16383;
}
