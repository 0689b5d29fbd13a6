/* quantize.h: int8 weights for decoding (formats/checkpoint.md, nmt-avg --quantize): symmetric, one
 * float32 scale per output row, scale = max |row| / 127, values in [-127, 127]. Two ways to choose
 * the integers on that grid: round to nearest, or GPTQ (Frantar et al. 2022), which rounds the
 * columns one at a time and moves each rounding error onto the columns not yet rounded, weighted by
 * how the layer's inputs correlate on calibration data (H = sum of x x^T over the input rows x), so
 * that the layer's outputs on such inputs change least. Both keep every row's largest value at
 * +-127, so the per-row requantisation of the cpu plugin's int8 layer (backend.h, linear_pack_q)
 * finds the same integers and scales again. The statistics come from forward passes of the model
 * on calibration batches (quant_calib_*). */
#ifndef NMT_QUANTIZE_H
#define NMT_QUANTIZE_H

#include <stdint.h>

#include "io/records.h"
#include "nn/model.h"

/* Whether the parameter NAME (NDIM dimensions) is a linear weight of the encoder or decoder: a
 * matrix named *.weight other than the embeddings and the output projection (emb.weight,
 * dec_emb.weight, out.weight: float32 in a quantized checkpoint); these are
 * what nmt-avg --quantize stores in int8. */
int quant_is_linear_weight(const char *name, int ndim);

/* Rounds W (ROWS x COLS, finite) to nearest: SCALE[r] = max |W[r,:]| / 127 (1 for a zero row), Q =
 * round-to-nearest-even(W * 127 / max |W[r,:]|). */
void quant_int8_rtn(const float *W, uint64_t rows, uint64_t cols, int8_t *q, float *scale);

/* As quant_int8_rtn (the same scales), the integers chosen by GPTQ against H (COLS x COLS, symmetric,
 * positive semi-definite: the sum of x x^T over SAMPLES input rows x); columns in decreasing order
 * of H's diagonal, H damped by 1% of its mean diagonal; a column no input row touched (zero
 * diagonal) is rounded to nearest. 0, or -1 with the error set (out of memory, H not positive
 * definite after damping). */
int quant_int8_gptq(const float *W, int rows, int cols, const double *H, int8_t *q, float *scale);

struct quant_calib;

/* Starts collecting, for every linear weight of M's encoder and decoder (the tensors nmt-avg
 * --quantize stores in int8), the sum of x x^T over the rows x of its input in M's forward passes.
 * Returns the collector, or NULL with the error set; M must outlive it. */
struct quant_calib *quant_calib_new(struct model *m);
/* Runs M forward on batch BR (no dropout), adding to the sums. 0, or -1 with the error set. */
int quant_calib_batch(struct quant_calib *c, const struct batch_record *br);
/* Returns the sum (COLS x COLS doubles, COLS the weight's input width) for the weight named NAME
 * and sets *ROWS_SEEN to the input rows it covers, or NULL for a tensor that is not a linear weight
 * of the encoder or decoder. */
const double *quant_calib_sum(const struct quant_calib *c, const char *name, uint64_t *rows_seen);
/* Stops observing M and frees C; quant_calib_free(NULL) is a no-op. */
void quant_calib_free(struct quant_calib *c);

#endif
