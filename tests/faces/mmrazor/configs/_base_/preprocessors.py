"""Image normalisations the classification configs share (pixel values on the 0-255 scale).

Read by the distillation configs as ``mmrazor::_base_/preprocessors.py``: the scope resolves to this folder
(``configs/``) because it is the nearest folder above each config that holds ``_base_/preprocessors.py``.
"""

# channels arrive as BGR and leave as RGB, centred on mid-grey
bgr_input_norm = dict(type='ImgDataPreprocessor', mean=[128.0, 120.0, 112.0], std=[64.0, 60.0, 56.0],
                      bgr_to_rgb=True)

# channels kept in order (the data-free configs: the generator makes the images)
plain_norm = dict(type='ImgDataPreprocessor', mean=[127.5, 127.5, 127.5], std=[63.75, 63.75, 63.75],
                  bgr_to_rgb=False)
