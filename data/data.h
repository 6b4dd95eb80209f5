// Everything in data/, for users who want all of it: data sets and their registry (WebDataset tar
// shards among them, and writing them), decoding and encoding,
// transforms and their registry, the sampler, the per-sample pipeline, normalisation, the device
// prefetcher, and the Loader that composes them into a BatchSource.
#pragma once

#include "data/batch_source.h"
#include "data/dataset.h"
#include "data/decode.h"
#include "data/encode.h"
#include "data/idx.h"
#include "data/loader.h"
#include "data/normalize.h"
#include "data/pack.h"
#include "data/pipeline.h"
#include "data/prefetcher.h"
#include "data/random.h"
#include "data/sampler.h"
#include "data/tar.h"
#include "data/transform_options.h"
#include "data/transforms.h"
#include "data/webdataset.h"
