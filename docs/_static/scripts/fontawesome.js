/* Replaces the theme's 1.5 MB Font Awesome script, which turns <i class="fa-..."> into
   inline SVG. The theme's stylesheet already draws those icons with the Font Awesome
   web font, so the site does not need the script. (Sphinx copies this file over the
   theme's file of the same name.) */
