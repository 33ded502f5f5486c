// COCO instances annotations (the `instances_*.json` of COCO and of every tool that exports its
// format): parsed once as a stream, listed as build entries with boxes, box classes and image
// ids, and rasterised into semantic masks (polygons and RLE, crowd regions included) without
// pycocotools, each image's segmentations read again from the file when its mask is made.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dscache/ingest/source_list.h"

namespace dscache {

// One annotation's segmentation: polygons (each x0 y0 x1 y1 ... in pixel edges, as COCO stores
// them), or a run-length encoding of the image's h x w pixels in column-major order (COCO's
// RLE: counts alternate background / foreground, starting with background).
struct CocoSegmentation {
  std::vector<std::vector<double>> polygons;  // empty when RLE
  std::vector<uint32_t> rle_counts;           // decoded counts (from the list or the LEB string)
  uint32_t rle_height = 0, rle_width = 0;     // RLE only: its `size` [h, w]
  bool is_rle() const { return polygons.empty() && rle_height != 0; }
};

// What the listing keeps of an annotation: its segmentation is validated while the file is
// parsed, then dropped (COCO's train2017 holds 860,000 of them) and read again from its bytes
// when a mask is made (read_segmentations).
struct CocoAnnotation {
  uint64_t category = 0;        // index into CocoInstances::categories (not the file's id)
  float box[4] = {0, 0, 0, 0};  // x1 y1 x2 y2 (from bbox x, y, w, h) in the image's pixels
  uint64_t offset = 0;          // the annotation's JSON object: bytes [offset, offset + length)
  uint32_t length = 0;          // of the file, or of CocoInstances::held when that is set
  bool crowd = false;           // iscrowd = 1
};

struct CocoImage {
  int64_t id = 0;
  std::string file_name;  // relative to the image root
  uint32_t height = 0, width = 0;
  std::vector<CocoAnnotation> annotations;  // in file order
  std::string bad;  // why this image cannot be built ("" = fine); see SourceEntry::bad
};

// The parsed file. Plain value; immutable once listed (shared by the build's threads).
struct CocoInstances {
  std::string path;                     // the JSON file, absolute (or its URL)
  std::vector<std::string> categories;  // names, in the file's `categories` order
  std::vector<int64_t> category_ids;    // the file's ids, same order (need not be contiguous)
  std::vector<CocoImage> images;        // in the file's `images` order
  uint64_t file_size = 0;               // the file as parsed: read_segmentations refuses one
  int64_t file_mtime_ns = 0;            // whose size or mtime differs since
  // The annotations' bytes, when they are not read from `path` again: set when list_source
  // lists a file on object storage with --coco-mask semantic (only the images' annotations,
  // which CocoAnnotation::offset then indexes); null otherwise.
  std::shared_ptr<const std::string> held;
};

// True when the file is a JSON object with "images", "annotations" and "categories" arrays
// (read as far as needed to tell). Never throws for a file that is not one.
bool is_coco_instances(const std::string& path);

// Parses the file as a stream (its text is never held whole: the elements of the root's arrays
// are parsed one at a time, the keys in any order). Error(kCorruption, path, reason) for
// malformed JSON (naming byte, line and column) or a structure that is not COCO's (naming the
// element: "annotations[12].bbox has 3 numbers"). An annotation that names an image id not in
// `images` is an error; one whose category is not in `categories`, or whose box lies outside its
// image, makes its image `bad` (a recorded skip, fatal under --strict), as does an RLE whose
// size differs from its image's or a polygon point beyond the image by more than its size. A
// box may pass the image's edge by up to 1 pixel (COCO's own files do, by float rounding): it is
// clipped. An annotation whose bbox has w or h <= 0, or no area left once clipped, is dropped
// (no box, no mask). A malformed RLE (a bad counts string, counts that do not cover its size) is
// an error.
CocoInstances read_coco_instances(const std::string& path);

// Image k's segmentations, in the order of images[k].annotations, parsed again from the
// annotations' bytes (one pread when they lie together in the file, else one each; or
// CocoInstances::held). Error(kCorruption, path, "changed
// since it was listed ...") when the file's size or mtime is not what it was when parsed.
// Thread-safe (the build's decoder threads call it through rasterize_semantic).
std::vector<CocoSegmentation> read_segmentations(const CocoInstances& coco, size_t k);

// Rasterises image k's annotations into a semantic mask: out[y * width + x] = category index + 1
// for pixels covered by an annotation (polygons filled as pycocotools' annToMask does -- the
// same pixels, by its rleFrPoly rule: a pixel is inside when its centre is, up to a 1/5-pixel
// rounding of the edges (coco_mask.cpp) -- RLE decoded), 0 elsewhere; where annotations overlap
// the later one in file order wins. `out` holds height * width bytes. Crowd annotations paint
// their category too (COCO marks crowd regions with their class; a trainer that wants to ignore
// them has box_crowd). Reads the segmentations with read_segmentations (and its errors).
void rasterize_semantic(const CocoInstances& coco, size_t k, uint8_t* out);

// Decodes COCO's compressed RLE string (the LEB128-like text of pycocotools' rleToString) into
// counts. Error(kCorruption) naming `where` for a malformed string.
std::vector<uint32_t> decode_rle_string(const std::string& text, const std::string& where);

// The listing of a COCO source (called by list_source): one entry per image in file order,
// `kind` "coco", no classes (labels 0), and the fields
//   boxes      boxes, float32 (n, 4): x1 y1 x2 y2 in the source image's pixels
//   box_labels rows of boxes, int64 (n,): the category index; classes = the category names
//   box_crowd  rows of boxes, uint8 (n,): 1 for iscrowd annotations
//   image_id   scalar, int64
//   mask       (options.coco_mask == "semantic") mask, uint8: rasterize_semantic, classes =
//              "background" then the category names
// options.image_root is required (Error(kInvalidArgument) naming --image-root otherwise). The
// file is parsed as a stream, as read_coco_instances parses it; list_source gives the same
// listing and digest from the file's whole text, which it reads first (an object on object
// storage is read that way anyway).
SourceListing list_coco(const std::string& path, const SourceOptions& options);

// A mask image (PNG, or any lossless format OpenCV reads) decoded to one channel of class ids:
// 8-bit or 16-bit grey as stored, a palette PNG as its palette indices (VOC-style masks), never
// colour-converted. Returns false with a reason ("mask is RGB (3 channels): expected one channel
// of class ids", "cannot decode") for anything else. *out holds h * w * *element_bytes bytes.
bool decode_mask(const uint8_t* data, size_t size, std::vector<uint8_t>* out, uint32_t* height,
                 uint32_t* width, uint32_t* element_bytes, std::string* reason);

}  // namespace dscache
