import { crc32, deflateSync } from 'node:zlib';
import { WarrenError } from '@warren/api';

/** A picture as rows of RGB bytes, top row first. */
export interface RgbImage {
  width: number;
  height: number;
  /** width × height × 3 bytes. */
  rgb: Buffer;
}

/** The largest screen a PPM here may describe (pixels): a bound on what a VM's dump can make the node allocate. */
const MAX_PIXELS = 8192 * 8192;
/** The largest PPM file of such a screen (its header is short): what a node reads of a dump at most. */
export const MAX_PPM_BYTES = 3 * MAX_PIXELS + 64;

/**
 * A binary PPM (P6, 8 bits a sample: what QEMU's `screendump` writes) as an RgbImage (pure).
 * Anything else, or a size its bytes do not hold, is refused.
 */
export function parsePpm(buf: Buffer): RgbImage {
  // Header: "P6", width, height, maxval, each after whitespace (comments are not written by QEMU), then one whitespace byte.
  const fields: string[] = [];
  let i = 0;
  while (fields.length < 4 && i < Math.min(buf.length, 64)) {
    while (i < buf.length && /\s/.test(String.fromCharCode(buf[i]!))) i++;
    const start = i;
    while (i < buf.length && !/\s/.test(String.fromCharCode(buf[i]!))) i++;
    fields.push(buf.toString('latin1', start, i));
  }
  const [magic, w, h, max] = fields;
  const width = Number(w);
  const height = Number(h);
  if (magic !== 'P6' || max !== '255' || !Number.isInteger(width) || !Number.isInteger(height) || width < 1 || height < 1 || width * height > MAX_PIXELS)
    throw new WarrenError('internal', `not a screen dump this node reads (${magic ?? 'empty'} ${w ?? ''}x${h ?? ''} max ${max ?? ''})`);
  const rgb = buf.subarray(i + 1, i + 1 + width * height * 3);
  if (rgb.length !== width * height * 3) throw new WarrenError('internal', `a ${width}x${height} screen dump holds ${rgb.length} bytes of pixels`);
  return { width, height, rgb };
}

/** A PNG chunk: length, type, data, CRC over type and data. */
function chunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'latin1');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(data, crc32(head.subarray(4))) >>> 0, 0);
  return Buffer.concat([head, data, crc]);
}

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/**
 * An RgbImage as a PNG (pure): 8-bit truecolour, no interlace, each row with filter "up" (a
 * screen's rows repeat each other much: the deflate of their differences is small and quick).
 */
export function encodePng(img: RgbImage): Buffer {
  const stride = img.width * 3;
  const raw = Buffer.alloc((stride + 1) * img.height);
  for (let y = 0; y < img.height; y++) {
    const row = img.rgb.subarray(y * stride, (y + 1) * stride);
    const out = (stride + 1) * y;
    if (y === 0) {
      raw[out] = 0;
      row.copy(raw, out + 1);
      continue;
    }
    raw[out] = 2;
    const above = (y - 1) * stride;
    for (let x = 0; x < stride; x++) raw[out + 1 + x] = (row[x]! - img.rgb[above + x]!) & 0xff;
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(img.width, 0);
  ihdr.writeUInt32BE(img.height, 4);
  ihdr[8] = 8; // bits per sample
  ihdr[9] = 2; // truecolour
  return Buffer.concat([PNG_SIGNATURE, chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw, { level: 6 })), chunk('IEND', Buffer.alloc(0))]);
}
