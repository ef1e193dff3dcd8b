import { z } from 'zod';

export const Image = z.object({
  name: z.string(),
  layers: z.array(z.string()),
  sizeBytes: z.number(),
  createdAt: z.string(),
});
export type Image = z.infer<typeof Image>;
export const ListImagesResponse = z.object({ images: z.array(Image) });
