export { down, up } from './up.js';
export { NODE_OPTIONS, nodeOptions } from './node-options.js';
export type { NodeOption, UpOptions } from './node-options.js';
