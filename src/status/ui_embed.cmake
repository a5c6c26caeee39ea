# ui_embed.cmake -- turn src/status/ui_page.html into a C array (the status page is
# compiled into the binary: no file to install, nothing to find at run time).
#   cmake -DIN=src/status/ui_page.html -DOUT=build/gen/ui_page.h -P src/status/ui_embed.cmake
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" body "${body}")
file(WRITE ${OUT}.tmp "/* generated from src/status/ui_page.html by src/status/ui_embed.cmake: do not edit */\n"
     "static const unsigned char ui_page_bytes[${bytes} + 1] = {\n${body}0x00};\n"
     "#define UI_PAGE_LEN ((size_t)${bytes})\n")
file(RENAME ${OUT}.tmp ${OUT})
