export { down, up } from './up.js';
export type { UpFlags } from './up.js';
