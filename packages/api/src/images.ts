import { z } from 'zod';
import { Env } from './sandbox.js';
import { QueryFlag } from './files.js';

export const Image = z.object({
  name: z.string(),
  layers: z.array(z.string()),
  sizeBytes: z.number(),
  createdAt: z.string(),
  /** The tenant that made it (only its keys see and use it); null: every tenant's (default images, an admin's). */
  tenant: z.string().nullable(),
  /**
   * Its own environment (the OCI config's `Env` of an imported or pulled image, a commit's
   * source image's): what every process in its sandboxes starts from, under the create's `env`.
   */
  env: z.record(z.string(), z.string()),
  /** Made by Warren itself (a default image: busybox, debian-python), not imported, pulled or committed. */
  builtIn: z.boolean(),
  /** A snapshot of a sandbox (POST /v1/sandboxes/{id}/snapshots): what a create from it takes where it names nothing. */
  snapshot: z
    .object({
      /** The sandbox it was taken of. */
      source: z.string(),
      backend: z.enum(['container', 'microvm', 'vm']),
      user: z.string().nullable(),
      workdir: z.string().nullable(),
    })
    .optional(),
});
export type Image = z.infer<typeof Image>;

/** An image as the lists (GET /v1/images, GET /v1/snapshots) show it: with who uses it. */
export const ListedImage = Image.extend({
  /**
   * How many live sandboxes (creating, running, paused) were created from it: the caller's
   * tenant's (an admin's key: every tenant's). Its delete is refused while there are any, unless forced.
   */
  usedBy: z.number().int(),
});
export type ListedImage = z.infer<typeof ListedImage>;

/** `force=1`: delete it though live sandboxes were created from it (they keep its layers while they live). */
export const DeleteImageQuery = z.strictObject({ force: QueryFlag.optional() });
export type DeleteImageQuery = z.infer<typeof DeleteImageQuery>;
export const ListImagesResponse = z.object({ images: z.array(ListedImage) });

/** An image or layer name: lowercase path segments, an optional `:tag`. */
export const ImageName = z
  .string()
  .max(200)
  .regex(/^[a-z0-9][a-z0-9._-]*(\/[a-z0-9][a-z0-9._-]*)*(:[A-Za-z0-9._-]+)?$/, 'lowercase letters, digits, . _ - and / segments, optional :tag');

export const ImportImageQuery = z.strictObject({ name: ImageName });
export const UploadLayerQuery = z.strictObject({ name: ImageName });

export const Layer = z.object({
  name: z.string(),
  digest: z.string(),
  sizeBytes: z.number(),
  createdAt: z.string(),
  /** The tenant that uploaded it (only its keys see and use it); null: every tenant's (an admin's). */
  tenant: z.string().nullable(),
});
export type Layer = z.infer<typeof Layer>;
export const ListLayersResponse = z.object({ layers: z.array(Layer) });

/** One line of an import or pull's NDJSON stream; the last is `done` or `error`. */
export const ImageEvent = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('progress'),
    phase: z.enum(['receive', 'layer']),
    layer: z.number().optional(),
    layers: z.number().optional(),
    bytes: z.number(),
  }),
  z.object({ type: z.literal('done'), image: Image }),
  z.object({ type: z.literal('error'), error: z.object({ code: z.string(), message: z.string() }) }),
]);
export type ImageEvent = z.infer<typeof ImageEvent>;

export const CommitRequest = z.strictObject({
  name: ImageName,
  /** Absolute paths inside the sandbox left out of the new layer. */
  exclude: z.array(z.string().startsWith('/').max(4096)).max(256).optional(),
});
export type CommitRequest = z.infer<typeof CommitRequest>;

/** A user name and password for a registry: sent as Basic auth, or to its token service. Never stored. */
export const RegistryAuth = z.strictObject({
  username: z.string().min(1).max(256),
  password: z.string().max(4096),
});

export const PullImageRequest = z.strictObject({
  ref: z.string().min(1).max(512),
  name: ImageName.optional(),
  auth: RegistryAuth.optional(),
});

export const PutImageRequest = z.strictObject({
  /** Layer digests, bottom first: on this node or in its blob store. */
  layers: z
    .array(z.string().regex(/^sha256:[0-9a-f]{64}$/))
    .min(1)
    .max(128),
  /** The image's own environment (see Image.env). */
  env: Env.optional(),
});

export const PublishLayersRequest = z.strictObject({
  /** A registry blob store: `oci://host[:port]/repository`, or `oci+http://…` for plain HTTP. */
  to: z
    .string()
    .max(512)
    .regex(/^oci(\+http)?:\/\/\S+$/, 'must be oci://host/repository or oci+http://host/repository'),
  /** An image whose layers are published. */
  image: ImageName.optional(),
  /** Layers by digest or name. */
  layers: z.array(z.string().min(1).max(256)).max(128).optional(),
  auth: RegistryAuth.optional(),
});
export type PublishLayersRequest = z.infer<typeof PublishLayersRequest>;

export const PublishLayersResponse = z.object({
  /** Each layer published, bottom first; `sent` is false when the registry had its blobs already. */
  layers: z.array(z.object({ digest: z.string(), sent: z.boolean() })),
});
export type PublishLayersResponse = z.infer<typeof PublishLayersResponse>;
