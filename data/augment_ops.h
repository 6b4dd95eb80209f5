// The image operations of RandAugment and TrivialAugmentWide on uint8 HWC pixels, in place, each
// reproducing the uint8 kernel of torchvision.transforms.v2.functional that torchvision's
// RandAugment calls (torchvision 0.26), including its float32 arithmetic:
//
//   op            argument                    torchvision call (magnitude m, as RandAugment passes it)
//   identity      -                           -
//   shear_x/_y    m (shear factor)            affine(shear=[degrees(atan(m)), 0] (or y), center=[0, 0])
//   translate_x/_y m (pixels, truncated)      affine(translate=[int(m), 0] (or y))
//   rotate        m (degrees)                 rotate(angle=m)
//   brightness    1 + m                       adjust_brightness
//   color         1 + m                       adjust_saturation (identity on 1 channel)
//   contrast      1 + m                       adjust_contrast
//   sharpness     1 + m                       adjust_sharpness
//   posterize     int(m) bits                 posterize
//   solarize      255 * m                     solarize(threshold)
//   autocontrast  -                           autocontrast
//   equalize      -                           equalize
//
// The geometric ops sample with nearest neighbour and fill 0 (RandAugment's defaults), on the same
// float32 sampling grid as torchvision's affine_grid + grid_sample; a pixel whose source coordinate
// lies within float rounding of a half-pixel boundary may take the neighbouring source pixel.
// Everything else is exact up to float32 rounding order (tests/data/augment_ops_test.cpp says how
// close, against tests/golden/augment_golden.h).
#pragma once

#include <cstdint>
#include <string>

namespace stoker::data {

// A uint8 image, height x width x channels (HWC), that an op changes in place. 1 or 3 channels.
struct PixelView {
  uint8_t* data = nullptr;
  int64_t height = 0, width = 0, channels = 0;
  int64_t size() const { return height * width * channels; }
};

enum class AugmentOp {
  kIdentity, kShearX, kShearY, kTranslateX, kTranslateY, kRotate, kBrightness, kColor, kContrast,
  kSharpness, kPosterize, kSolarize, kAutoContrast, kEqualize,
};
constexpr int kAugmentOpCount = 14;

// The op's name as torchvision's augmentation space spells it ("ShearX", "AutoContrast").
const char* augment_op_name(AugmentOp op);

// Applies `op` with magnitude `m` as torchvision's _AutoAugmentBase._apply_image_or_video_transform
// does (the table above). Throws when the image has neither 1 nor 3 channels.
void apply_augment_op(PixelView image, AugmentOp op, double m);

// The kernels, with torchvision's arguments.
// The inverse affine matrix of torchvision's _get_inverse_affine_matrix (v2), center relative to
// the image centre.
void affine_nearest(PixelView image, double angle, double translate_x, double translate_y, double shear_x,
                    double shear_y, double center_x, double center_y);
void adjust_brightness(PixelView image, double factor);
void adjust_saturation(PixelView image, double factor);
void adjust_contrast(PixelView image, double factor);
void adjust_sharpness(PixelView image, double factor);
void posterize(PixelView image, int bits);
void solarize(PixelView image, double threshold);
void autocontrast(PixelView image);
void equalize(PixelView image);

}  // namespace stoker::data
