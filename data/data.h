// Everything in data/, for users who want all of it: data sets and their registry (WebDataset tar
// shards among them, and writing them), decoding and encoding, transforms and their registry
// (RandAugment's operations among them), the caches, the sampler, the per-sample pipeline,
// normalisation, the device prefetcher, the Loader that composes them into a BatchSource (and the
// RetunableLoader around it), the batch operations and their registry, and the data: section's
// settings. (tests/layering_test.py checks that it names every header of data/ but *_detail.h.)
#pragma once

#include "data/augment_ops.h"
#include "data/augmented_source.h"
#include "data/auto_augment.h"
#include "data/batch_ops.h"
#include "data/batch_source.h"
#include "data/cache.h"
#include "data/dataset.h"
#include "data/decode.h"
#include "data/encode.h"
#include "data/host_copy.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/mixup.h"
#include "data/normalize.h"
#include "data/pack.h"
#include "data/pipeline.h"
#include "data/prefetcher.h"
#include "data/random.h"
#include "data/random_erasing.h"
#include "data/resolution.h"
#include "data/retunable_loader.h"
#include "data/sampler.h"
#include "data/settings.h"
#include "data/stage_clock.h"
#include "data/tar.h"
#include "data/tensor_batches.h"
#include "data/transform_options.h"
#include "data/transforms.h"
#include "data/webdataset.h"
