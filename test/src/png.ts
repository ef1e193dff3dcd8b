import assert from 'node:assert/strict';
import { inflateSync } from 'node:zlib';

/** A PNG as Warren's screen writes it (8-bit RGB, filters none and up) decoded to its pixels: for tests of what a screen shows. */
export function decodeRgbPng(png: Buffer): { width: number; height: number; rgb: Buffer } {
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'a PNG signature');
  let off = 8;
  let width = 0;
  let height = 0;
  const idat: Buffer[] = [];
  while (off < png.length) {
    const len = png.readUInt32BE(off);
    const type = png.toString('latin1', off + 4, off + 8);
    const data = png.subarray(off + 8, off + 8 + len);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      assert.deepEqual([data[8], data[9]], [8, 2], '8-bit RGB');
    } else if (type === 'IDAT') idat.push(data);
    off += 12 + len;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * 3;
  const rgb = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)];
    assert.ok(filter === 0 || filter === 2, `row filter ${filter}`);
    for (let x = 0; x < stride; x++) {
      const v = raw[y * (stride + 1) + 1 + x]!;
      rgb[y * stride + x] = filter === 2 && y > 0 ? (v + rgb[(y - 1) * stride + x]!) & 0xff : v;
    }
  }
  return { width, height, rgb };
}

/** How many pixels of each colour a picture has, most first. */
export function colourCounts(img: { rgb: Buffer }): Array<[string, number]> {
  const counts = new Map<string, number>();
  for (let i = 0; i + 2 < img.rgb.length; i += 3) {
    const k = img.rgb.toString('hex', i, i + 3);
    counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  return [...counts].sort((a, b) => b[1] - a[1]);
}
