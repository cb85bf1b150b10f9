# Sourced by the shell checks that need an installed Fusee:
#   stage_install BUILD_DIR DESTDIR
# installs BUILD_DIR into DESTDIR (meson install --destdir; fusee.pc and the
# CMake package are relocatable, so the staged copy works where it lands) and
# sets prefix, libdir and include_dir to the staged paths, PKG_CONFIG_PATH to
# the staged fusee.pc's folder and LD_LIBRARY_PATH to libdir.
stage_install() {
  meson install -C "$1" --destdir "$2" --no-rebuild --quiet
  local pc
  pc=$(find "$2" -name fusee.pc -path '*/pkgconfig/*' | head -1)
  include_dir=$(find "$2" -type d -path '*/include/fusee' | head -1)
  if [ -z "$pc" ] || [ -z "$include_dir" ]; then
    echo "stage_install: the install has no fusee.pc or include/fusee/" >&2
    return 1
  fi
  prefix=$(dirname "$(dirname "$include_dir")")
  libdir=$(dirname "$(dirname "$pc")")
  export PKG_CONFIG_PATH="$(dirname "$pc")"
  export LD_LIBRARY_PATH="$libdir"
}
