import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

export default defineConfig({
  plugins: [react()],
  // The app is served from a temporary static server: relative asset URLs.
  base: "./",
});
